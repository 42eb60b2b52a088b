"""A collector's one stream of batches, read by one thread at a time: :class:`Batches`.

Iterating a collector from two threads at once, or while :meth:`~rlcollect.BaseCollector.start`
collects in the background, would interleave two readers in one rollout (or hand one of them
``None``); :class:`Batches` refuses both with a message saying what to do instead. A state taken
from another thread waits for the batch under way (:func:`between_batches`), so it is
always the state between two batches.

Examples:
    >>> import threading
    >>> batches = Batches(iter([1, 2]), threading.RLock(), lambda: False)
    >>> list(batches)
    [1, 2]
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

__all__ = ["Batches", "between_batches"]


class Batches:
    """The batches of ``source`` (a collector's stream), refusing a second reader at once and a
    reader while ``in_background()`` is true; ``busy`` is held while a batch is being made."""

    def __init__(self, source: Iterator[Any], busy: threading.RLock,
                 in_background: Callable[[], bool]) -> None:
        self.source = source
        self._busy = busy
        self._in_background = in_background
        self._reader: int | None = None  # the thread making a batch now
        self._guard = threading.Lock()  # makes the check and the claim of ``_reader`` one step

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Any:
        if self._in_background():
            raise RuntimeError("the collector collects in the background (start()): its batches go to the "
                               "replay buffer; sample from the buffer, or call async_shutdown() before "
                               "iterating the collector yourself")
        me = threading.get_ident()
        with self._guard:
            if self._reader is not None and self._reader != me:
                raise RuntimeError("another thread is iterating this collector at the same time: a collector "
                                   "has one stream of batches; iterate it from one thread (hand the batches "
                                   "to the others, e.g. through a queue.Queue), or build one per thread")
            self._reader = me
        try:
            with self._busy:  # a state_dict() of another thread is taken before or after this batch
                return next(self.source)
        finally:
            with self._guard:
                self._reader = None

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    @property
    def finished(self) -> bool:
        """Whether the stream has ended (or was closed)."""
        source = self.source
        return isinstance(source, Generator) and inspect.getgeneratorstate(source) == inspect.GEN_CLOSED


@contextlib.contextmanager
def between_batches(busy: threading.RLock, timeout: float, what: str) -> Iterator[None]:
    """Hold ``busy`` (wait for the batch under way, at most ``timeout`` s) while ``what`` runs."""
    if not busy.acquire(timeout=timeout):
        raise TimeoutError(f"{what} waited {timeout} s for the batch another thread is collecting: call it "
                           "between batches from the thread that iterates")
    try:
        yield
    finally:
        busy.release()
