"""A collector's one stream of batches (:class:`Stream`, the part behind ``iter(collector)`` and
``collector.next()``), read by one thread at a time (:class:`Batches`).

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
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any

__all__ = ["Batches", "Stream", "between_batches"]


class Stream:
    """A collector's one stream of batches, made by ``batches()`` (a collector's method: the
    iterator keeps the collector alive) when first read. While an iterator over it is alive
    (referenced, not finished), :meth:`iterator` returns that one, so every batch is delivered
    once; one dropped (``break``) leaves the stream ready for the next loop. An error of
    collection (a Ctrl-C while it waits, too) calls ``shutdown(raise_on_error=False)`` before it
    propagates; a failure of that is a warning.

    Examples:
        >>> stream, batches = Stream(shutdown=lambda raise_on_error: None), lambda: iter([1, 2])
        >>> stream.next(batches), list(stream.iterator(batches)), stream.next(batches)
        (1, [2], None)
    """

    def __init__(self, shutdown: Callable[..., None], in_background: Callable[[], bool] = lambda: False
                 ) -> None:
        self.busy = threading.RLock()  # held while a batch is made: a state from another thread waits
        self.started = False  # whether a batch was asked for
        self.cause = "shutdown() was called"  # why the collector was shut down, for closed_error()
        self._shutdown, self._in_background = shutdown, in_background
        self._live: weakref.ref[Batches] | None = None
        self._next: Iterator[Any] | None = None  # next()'s iterator

    def iterator(self, batches: Callable[[], Iterator[Any]]) -> Batches:
        """The live iterator, or a new one going on from where the last one stopped."""
        live = self._live() if self._live is not None else None
        if live is not None and not live.finished:
            return live
        stream = Batches(self._generate(batches), self.busy, self._in_background)
        self._live = weakref.ref(stream)
        return stream

    def next(self, batches: Callable[[], Iterator[Any]]) -> Any:
        """The next batch, or ``None`` once the stream ended."""
        if self._next is None:
            self._next = self.iterator(batches)
        try:
            return next(self._next)
        except StopIteration:
            return None

    def closed_error(self) -> RuntimeError:
        """The error for a use after the collector's shutdown, saying why it was shut down."""
        return RuntimeError(f"the collector was shut down ({self.cause}): build a new one to collect more")

    def _generate(self, batches: Callable[[], Iterator[Any]]) -> Generator[Any, None, None]:
        self.started = True
        try:
            yield from batches()
        except GeneratorExit:  # the loop was left, or the iterator dropped: not an error
            raise
        except BaseException as error:
            self.cause = f"collection stopped on {type(error).__name__}: {str(error)[:200]}"
            try:
                self._shutdown(raise_on_error=False)
            except Exception as failure:
                warnings.warn(f"shutting down after {type(error).__name__} failed too: {failure!r}",
                              RuntimeWarning, stacklevel=3)
            raise


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
