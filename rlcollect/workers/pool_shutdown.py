"""How a :class:`~rlcollect.workers.pool.WorkerPool` ends: at once or soon, from any thread.

:meth:`PoolShutdown.shutdown` first stops every wait of another thread driving the pool
(background collection: waits are sliced and check a closing flag; no worker is started once it
is set), then asks every worker to close and ends those still running, bounded by its timeout.
Workers that built a probe and wait for their setup (the pool never started) are ended too.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

from rlcollect.workers.transport import Transport, await_exit
from rlcollect.workers.worker import BatchReport

__all__ = ["PoolShutdown"]

#: after the grace period, how long terminated (then killed) workers are given to exit
_KILL_WAIT = 0.5


class PoolShutdown:
    """The end of a :class:`~rlcollect.workers.pool.WorkerPool` (a part of it)."""

    # the pool's own (see WorkerPool)
    transport: Transport
    num_workers: int
    timeout: float
    started: bool
    closed: bool
    _closing: threading.Event
    _lock: threading.RLock
    _stopped: threading.Event
    _awaiting: set[int]
    _in_flight: dict[int, tuple[Any, float]]
    _stash: list[tuple[int, BatchReport]]
    _owner: int  # the pid of the process that started the workers

    def close_soon(self) -> None:
        """Ask every worker to close after its command under way, without waiting, and start no
        other (after an error in background collection); :meth:`shutdown` still stops them."""
        if os.getpid() != self._owner:  # a fork of the owner: the workers are not this process's
            return
        with self._lock:
            self._closing.set()
            if self.started and not self.closed:
                for worker in range(self.num_workers):
                    self.transport.send(worker, ("close", None))

    def interrupt(self) -> None:
        """Make every wait of another thread give up (within :data:`_SLICE` s) and start no worker."""
        self._closing.set()

    def shutdown(self, timeout: float | None = None) -> None:
        """Ask every worker to close, then end the ones still running; idempotent and bounded.

        Workers get ``timeout`` seconds (default: the pool's ``timeout``) to finish their command
        under way and exit by themselves; those left are then terminated and killed, all at once,
        in about a second more. An interruption (``KeyboardInterrupt``) while waiting still ends
        every worker before it propagates. A call while another one is stopping the workers waits
        for it (up to its own timeout, and the second or so more of the ending).
        """
        if os.getpid() != self._owner:  # a fork of the owner (its finalizers, at its exit): the
            self.closed = True  # workers go on serving the owner, untouched
            return
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._closing.set()
        if not self.closed:
            locked = self._lock.acquire(timeout=max(0.01, deadline - time.monotonic()))  # no spawn under way
            first, self.closed = not self.closed, True
            if locked:
                self._lock.release()
            if first:
                try:
                    self._stop_workers(deadline)
                finally:
                    self._stopped.set()
                return
        self._stopped.wait(max(0.0, deadline - time.monotonic()) + 2 * _KILL_WAIT)  # the first one's

    def _stop_workers(self, deadline: float) -> None:
        started = list(range(self.num_workers)) if self.started else sorted(self._awaiting)
        interrupted = True
        try:
            for worker in started:
                self.transport.send(worker, ("close", None))
            await_exit(self.transport, started, deadline, _KILL_WAIT)
            interrupted = False
            self._keep_last_reports()
        finally:  # interrupted (a second Ctrl-C): no more grace, every worker is ended now
            for worker in started:
                with contextlib.suppress(Exception):
                    self.transport.stop(worker, 0.0 if interrupted else max(0.0, deadline - time.monotonic()))
            self._in_flight.clear()
            self.transport.close()

    def _keep_last_reports(self) -> None:
        """Keep, as :meth:`pending`, the reports of batches finished while the workers stopped
        (workers that write a replay buffer wrote their frames): the collector's counts agree."""
        for worker in list(self._in_flight):
            with contextlib.suppress(Exception):
                for _, (kind, payload) in self.transport.wait([worker], 0.0):
                    if kind == "done":
                        self._stash.append((worker, payload))
