"""Background collection into the replay buffer: the part behind ``start()``, ``pause()`` and
``async_shutdown()``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import torch
from tensordict import TensorDictBase

__all__ = ["Background"]


class Background:
    """A collector's collection into its replay buffer in a thread while the caller trains (the
    part behind the collector's ``start()``, ``pause()`` and ``async_shutdown()``).

    Examples:
        >>> background = Background()
        >>> background.running
        False
        >>> background.start(lambda: iter([None, None]), quiesce=lambda: None)
        >>> background.stop(time.monotonic() + 5) is None, background.running
        (True, False)
    """

    def __init__(self) -> None:
        self._thread: _Background | None = None

    @property
    def running(self) -> bool:
        """Started and not stopped."""
        return self._thread is not None

    @property
    def error(self) -> BaseException | None:
        """The error collection stopped on, until :meth:`stop` returns it (``None`` before)."""
        return None if self._thread is None else self._thread.error

    def start(self, batches: Callable[[], Iterator[TensorDictBase | None]], quiesce: Callable[[], None],
              on_error: Callable[[], None] = lambda: None) -> None:
        """Run ``batches()`` in a thread; ``quiesce`` returns once no batch is under way (a pause
        waits for it), ``on_error`` runs in the thread if collection stops on an error.

        Raises:
            RuntimeError: already started.
        """
        if self._thread is not None:
            raise RuntimeError("start() was already called")
        self._thread = _Background(batches(), quiesce, on_error)

    @contextlib.contextmanager
    def pause(self, timeout: float, on_failure: Callable[[], None]) -> Iterator[None]:
        """While the context is open, no batch is collected; entering waits (up to ``timeout``
        seconds) for the batch under way. If collection stopped on an error, ``on_failure`` runs
        (the collector's shutdown, which raises that error) and ``RuntimeError`` is raised."""
        thread = self._thread
        if thread is None:
            raise RuntimeError("pause() needs background collection: call start() first")
        if not thread.hold(timeout):  # collection stopped on an error: stop the rest, raise it
            on_failure()
            raise RuntimeError("background collection stopped")  # (on_failure raised its error)
        try:
            yield
        finally:
            thread.release()

    def stop(self, deadline: float, interrupt: Callable[[], None] | None = None) -> BaseException | None:
        """Stop the thread, if any; return the error collection stopped on, for the caller to
        raise once everything is stopped. The thread may finish the batch under way until half
        the time left to ``deadline`` (``time.monotonic()``); then ``interrupt`` makes it give up
        its waits."""
        thread, self._thread = self._thread, None
        return None if thread is None else thread.stop(deadline, interrupt)


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
        """Stop the thread (see :meth:`Background.stop`); return its error."""
        self._stop.set()
        self._released.set()
        self._thread.join(max(0.0, (deadline - time.monotonic()) / 2))
        if self._thread.is_alive() and interrupt is not None:
            interrupt()
            self._thread.join(min(max(0.0, deadline - time.monotonic()), 0.5) or 0.2)
        return self.error


