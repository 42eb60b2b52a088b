"""Background collection into the replay buffer: ``start()``, ``pause()``, ``async_shutdown()``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

__all__ = ["BackgroundCollection"]


class BackgroundCollection:
    """What every collector gives for collecting in a background thread (a part of
    :class:`~rlcollect.BaseCollector`)."""

    _iteration_started: bool = False

    if TYPE_CHECKING:  # the collector's own
        def iterator(self) -> Iterator[TensorDictBase | None]: ...
        def shutdown(self, timeout: float | None = None, close_env: bool = True,
                     raise_on_error: bool = True) -> None: ...
        def _quiesce(self) -> None: ...
        def _shutdown_receivers(self) -> None: ...

    # -- background collection into the replay buffer ---------------------------------------
    replay_buffer: Any = None
    _background: _Background | None = None

    def start(self) -> None:
        """Collect into ``replay_buffer`` in the background until :meth:`async_shutdown`.

        A thread drives the collector; with worker processes, the workers write a shared or
        memmap buffer themselves and the thread only hands out the work.

        Raises:
            RuntimeError: no ``replay_buffer`` was given, or collection already started.
        """
        if self.replay_buffer is None:
            raise RuntimeError(f"{type(self).__name__}.start() needs replay_buffer= at construction")
        if self._background is not None:
            raise RuntimeError("start() was already called")
        self._iteration_started = True
        self._background = _Background(self.iterator(), self._quiesce, self._on_background_error)

    @contextlib.contextmanager
    def pause(self, timeout: float = 60.0) -> Iterator[None]:
        """While the context is open, nothing is written to the replay buffer.

        Entering waits (up to ``timeout`` seconds) for the batches under way to be written.
        """
        background = self._background
        if background is None:
            raise RuntimeError("pause() needs background collection: call start() first")
        if not background.hold(timeout):  # collection stopped on an error: stop the rest, raise it
            self.shutdown(timeout=timeout)
            raise RuntimeError("background collection stopped")  # (shutdown raised its error)
        try:
            yield
        finally:
            background.release()

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stop background collection started by :meth:`start`, then shut down (see
        :meth:`shutdown`: every thread and process is stopped before an error of the collection
        is raised)."""
        self.shutdown(timeout=timeout, close_env=close_env)

    def _stop_background(self, deadline: float, interrupt: Callable[[], None] | None = None
                         ) -> BaseException | None:
        """Stop the background thread, if any, and the receiver schemes (every ``shutdown``
        starts with this); return the error collection stopped on, for the caller to raise once
        everything is stopped.

        The thread may finish the batch under way until half the time left to ``deadline``
        (``time.monotonic()``); then ``interrupt`` makes it give up its waits.
        """
        background, self._background = self._background, None
        try:
            return background.stop(deadline, interrupt) if background is not None else None
        finally:
            self._shutdown_receivers()

    def _on_background_error(self) -> None:
        """Called in the background thread once collection stopped on an error: release what
        would otherwise keep running until :meth:`shutdown` (the workers)."""
        return


class _Background:
    """A thread running a collector's iterator, which can be held between batches and stopped."""

    def __init__(self, batches: Iterator[TensorDictBase | None], quiesce: Callable[[], None],
                 on_error: Callable[[], None] = lambda: None) -> None:
        self._batches, self._quiesce, self._on_error = batches, quiesce, on_error
        self._stop, self._hold = threading.Event(), threading.Event()
        self._held, self._released = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        # the collection thread sets the caller's torch threads itself: a new thread's MKL ops
        # otherwise ran on a team of threads whatever the caller's setting (as the policy
        # server's did, see rlcollect.workers.inference)
        self._torch_threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._run, name="rlcollect-background", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        torch.set_num_threads(self._torch_threads)
        try:
            for _ in self._batches:
                if self._stop.is_set():
                    break
                while self._hold.is_set() and not self._stop.is_set():  # paused again at once: still held
                    self._quiesce()
                    self._held.set()
                    while not (self._released.wait(0.05) or self._stop.is_set()):
                        pass
                    self._released.clear()
        except BaseException as error:  # kept for the caller: raised after the shutdown
            if not self._stop.is_set():  # errors caused by the shutdown itself are not news
                self.error = error
                with contextlib.suppress(BaseException):
                    self._on_error()
        finally:
            self._held.set()

    def hold(self, timeout: float) -> bool:
        """Pause between batches; ``False`` if collection stopped on an error instead."""
        self._hold.set()
        if not self._held.wait(timeout):
            self._hold.clear()
            raise TimeoutError(f"background collection did not pause within {timeout} s")
        return self.error is None

    def release(self) -> None:
        """End a :meth:`hold`. ``held`` is cleared here, not by the thread: a ``hold`` right after
        this one must wait for the thread to stop again, not find the previous pause's flag."""
        self._held.clear()
        self._hold.clear()
        self._released.set()

    def stop(self, deadline: float, interrupt: Callable[[], None] | None = None) -> BaseException | None:
        """Stop the thread (see :meth:`BaseCollector._stop_background`); return its error."""
        self._stop.set()
        self._released.set()
        self._thread.join(max(0.0, (deadline - time.monotonic()) / 2))
        if self._thread.is_alive() and interrupt is not None:
            interrupt()
            self._thread.join(min(max(0.0, deadline - time.monotonic()), 0.5) or 0.2)
        return self.error


