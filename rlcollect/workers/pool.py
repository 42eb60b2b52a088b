"""The parent's side of the workers, over any transport: start, command, watch, restart, stop.

Every wait has a timeout and notices a dead worker at once (a process's sentinel, a Ray actor's
error); a worker that stops answering is deemed hung after ``timeout`` seconds. Either is replaced
by a fresh worker (fresh envs, the next block of seeds, trajectory ids after the ones it handed
out, the current weights) and its interrupted ``collect`` is sent again, up to ``max_restarts``
times; after that its original exception is raised here.

Reports that arrived but were not consumed yet (drained before a ``state_dict``, or the rest of
several that arrived together) are kept in order and count as busy: :meth:`WorkerPool.pending`
and :meth:`WorkerPool.restore_pending` carry them through a ``state_dict``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from rlcollect.rollout.profiling import ProfileConfig
from rlcollect.workers.transport import Transport
from rlcollect.workers.worker import BatchReport, WorkerFailure, WorkerInfo, WorkerSetup

__all__ = ["WorkerPool"]


class WorkerPool:
    """One worker per :class:`WorkerSetup`, reached through ``transport``.

    Args:
        transport: processes or Ray actors.
        setup: builds worker ``w``'s setup, when it starts and when it restarts (then with the
            current weights); the pool keeps none, so nothing large stays in this process.
        num_workers: workers.
        timeout: seconds a worker may take to start or to answer one command.
        max_restarts: restarts allowed per worker.
        restart_seed_stride: added to a worker's seed at each restart (fresh envs, fresh seeds).
        traj_start: the first local trajectory id of every worker.
        check: called whenever answers arrive, before a failure is handled: a health check of
            what the workers depend on (a policy server), raising its error instead.
    """

    def __init__(
        self,
        transport: Transport,
        setup: Callable[[int], WorkerSetup],
        num_workers: int,
        *,
        timeout: float,
        max_restarts: int,
        restart_seed_stride: int,
        traj_start: int = 0,
        check: Callable[[], None] | None = None,
    ) -> None:
        self.transport = transport
        self.check = check
        self._setup = setup
        self.timeout, self.max_restarts = timeout, max_restarts
        self._seed_stride = restart_seed_stride
        self.num_workers = num_workers
        self.restarts = [0] * num_workers
        self.next_traj_id = [traj_start] * num_workers
        self.infos: list[WorkerInfo | None] = [None] * num_workers
        self._profile: ProfileConfig | None = None
        self._in_flight: dict[int, tuple[Any, float]] = {}  # worker -> (collect argument, sent at)
        self._stash: list[tuple[int, BatchReport]] = []  # reports arrived but not consumed
        self.started = self.closed = False

    # -- starting -------------------------------------------------------------------------------
    def start(self, profile: ProfileConfig | None = None) -> None:
        """Start every worker (profiling those ``profile`` selects); return once each is ready."""
        self.started, self._profile = True, profile
        for worker in range(self.num_workers):
            self.transport.spawn(worker, dataclasses.replace(self._setup(worker), profile=profile))
        for worker in range(self.num_workers):
            self._await_ready(worker)

    def _await_ready(self, worker: int) -> None:
        answers = self.transport.wait([worker], self.timeout)
        if not answers:
            self.transport.stop(worker, 0.0)
            raise TimeoutError(f"worker {worker} did not start within timeout={self.timeout} s")
        kind, payload = answers[0][1]
        if kind != "ready":
            self.transport.stop(worker, 0.0)
            self._raise(worker, payload if kind == "error" else None, str(payload))
        self.infos[worker] = payload

    # -- commands -------------------------------------------------------------------------------
    def collect(self, worker: int, argument: Any) -> None:
        """Ask ``worker`` for a batch (sent again after a restart)."""
        self._in_flight[worker] = (argument, time.monotonic())
        self.transport.send(worker, ("collect", argument))

    def request(self, worker: int, command: str, argument: Any = None) -> Any:
        """Send a control command and return the worker's answer (an error is raised)."""
        self.transport.send(worker, (command, argument))
        answers = self.transport.wait([worker], self.timeout)
        if not answers:
            raise TimeoutError(f"worker {worker} did not answer {command!r} within {self.timeout} s")
        kind, payload = answers[0][1]
        if kind != "ok":
            self._raise(worker, payload if kind == "error" else None, str(payload))
        return payload

    def busy(self) -> set[int]:
        """Workers with a ``collect`` in flight or a report not yet consumed."""
        return set(self._in_flight) | {w for w, _ in self._stash}

    def drain(self) -> None:
        """Wait for every ``collect`` in flight; keep the reports for :meth:`wait`."""
        while self._in_flight:
            self._stash.extend(self._wait_in_flight(list(self._in_flight)))

    def pending(self) -> list[tuple[int, BatchReport]]:
        """The reports arrived and not consumed, in arrival order (call :meth:`drain` first)."""
        return list(self._stash)

    def restore_pending(self, reports: Iterable[tuple[int, BatchReport]]) -> None:
        """Take back :meth:`pending` of a saved pool: they are consumed before any new batch."""
        self._stash = list(reports) + self._stash

    def wait(self, workers: Iterable[int]) -> list[tuple[int, BatchReport]]:
        """Until at least one of ``workers`` reports a batch (several may); restart failures."""
        workers = list(workers)
        stashed = [(w, r) for w, r in self._stash if w in workers]
        if stashed:
            self._stash = [(w, r) for w, r in self._stash if w not in workers]
            return stashed
        return self._wait_in_flight([w for w in workers if w in self._in_flight])

    def wait_one(self, workers: Iterable[int]) -> tuple[int, BatchReport]:
        """Like :meth:`wait`, but one report; the others stay pending (and count as busy)."""
        first, *rest = self.wait(workers)
        self._stash = rest + self._stash
        return first

    def _wait_in_flight(self, workers: list[int]) -> list[tuple[int, BatchReport]]:
        if not workers:
            raise RuntimeError("waiting for batches, but none is being collected")
        while True:
            deadline = min(self._in_flight[w][1] for w in workers) + self.timeout
            answers = self.transport.wait(workers, max(0.0, deadline - time.monotonic()))
            if self.check is not None:
                self.check()
            reports = []
            for worker, (kind, payload) in answers:
                if kind == "done":
                    self._in_flight.pop(worker)
                    self.next_traj_id[worker] = payload.next_traj_id
                    reports.append((worker, payload))
                else:
                    self._restart(worker, payload if kind == "error" else None, str(payload))
            if not answers:
                for worker in workers:
                    if time.monotonic() - self._in_flight[worker][1] >= self.timeout:
                        self._restart(worker, None, f"no answer within timeout={self.timeout} s")
            if reports:
                return reports

    # -- failures -------------------------------------------------------------------------------
    def _restart(self, worker: int, failure: WorkerFailure | None, what: str) -> None:
        if self.closed:
            raise RuntimeError("the workers were shut down")
        self.transport.stop(worker, 0.0)
        self.restarts[worker] += 1
        what = failure.message if failure else what
        if self.restarts[worker] > self.max_restarts:
            self._in_flight.pop(worker, None)
            self._raise(worker, failure, what)
        warnings.warn(
            f"rlcollect worker {worker} failed ({what}); restarting it with fresh envs "
            f"(restart {self.restarts[worker]} of {self.max_restarts})",
            RuntimeWarning,
            stacklevel=3,
        )
        setup = self._setup(worker)  # built now: the current weights
        seed = None if setup.seed is None else setup.seed + self._seed_stride * self.restarts[worker]
        self.transport.spawn(worker, dataclasses.replace(
            setup, seed=seed, traj_start=self.next_traj_id[worker], profile=self._profile))
        self._await_ready(worker)
        if worker in self._in_flight:  # its batch was lost: collect it again
            self.collect(worker, self._in_flight[worker][0])

    def _raise(self, worker: int, failure: WorkerFailure | None, what: str = "") -> None:
        if failure is not None and failure.error is not None:
            error = failure.error
            note = f"raised in rlcollect worker {worker}; its traceback:\n{failure.traceback}"
            if hasattr(error, "add_note"):  # Python >= 3.11
                error.add_note(note)
                raise error
            raise error from RuntimeError(note)
        if failure is not None:
            raise RuntimeError(f"worker {worker}: {failure.error_type}: {failure.message}\n"
                               f"{failure.traceback}")
        raise RuntimeError(f"rlcollect worker {worker} failed past max_worker_restarts: {what}")

    # -- stopping -------------------------------------------------------------------------------
    def shutdown(self, timeout: float | None = None) -> None:
        """Ask every worker to close, then end the ones still running; idempotent and bounded."""
        if self.closed:
            return
        self.closed = True
        started = list(range(self.num_workers)) if self.started else []
        for worker in started:
            self.transport.send(worker, ("close", None))
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        for worker in started:
            self.transport.stop(worker, max(0.0, deadline - time.monotonic()))
        self._in_flight.clear()
        self.transport.close()

