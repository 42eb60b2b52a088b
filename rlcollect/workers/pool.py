"""The parent's side of the workers, over any transport: start, command, watch, restart, stop.

Every wait has a timeout and notices a dead worker at once (a process's sentinel, a Ray actor's
error); a worker that does not start within ``start_timeout`` seconds, or stops answering a command
for ``timeout`` seconds, is deemed hung. Either is replaced by a fresh worker (fresh envs, the next
block of seeds, trajectory ids after the ones it handed out, the current weights) and its
interrupted ``collect`` is sent again once the replacement is ready, up to ``max_restarts`` times;
after that its original exception is raised here (see
:class:`~rlcollect.workers.failures.FailureLog`). A replacement is not waited for where it fails:
its start is awaited with the other workers' batches, so they keep coming meanwhile (a Ray actor
waiting for a node with room holds up nobody but those waiting for its own batch), and its failure
to start takes one more restart.

Reports that arrived but were not consumed yet (drained before a ``state_dict``, or the rest of
several that arrived together) are kept in order and count as busy: :meth:`WorkerPool.pending`
and :meth:`WorkerPool.restore_pending` carry them through a ``state_dict``.

The pool may be driven by another thread (background collection) while this one shuts it down:
:meth:`WorkerPool.shutdown` first stops every wait of that thread (waits are sliced and check a
closing flag; no worker is started once it is set), then stops every worker, bounded by its timeout.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from rlcollect.common.callers import outside_stacklevel
from rlcollect.common.owner import check_owner
from rlcollect.rollout.profiling import ProfileConfig
from rlcollect.workers.failures import FailureLog, where
from rlcollect.workers.pool_shutdown import PoolShutdown
from rlcollect.workers.transport import Transport
from rlcollect.workers.worker import BatchReport, WorkerFailure, WorkerInfo, WorkerSetup

__all__ = ["PoolClosed", "WorkerPool"]

#: the longest single wait: a thread waiting in the pool notices a shutdown within this
_SLICE = 0.1
#: how long a replacement may take to start before the pool looks (once) at what it waits for
_TELL_AFTER = 2.0
#: how often a transport with a health check of its own is asked which workers went silent
_HEALTH_EVERY = 0.5


class PoolClosed(RuntimeError):
    """The pool was shut down (raised to a thread still waiting on it)."""


def _why(payload: Any) -> str:
    """A failure's payload as words (a transport's :class:`~rlcollect.workers.main_guard.Unrecoverable`
    kept as such: ``str()`` of it would be a plain ``str``)."""
    return payload if isinstance(payload, str) else str(payload)


class WorkerPool(PoolShutdown):
    """One worker per :class:`WorkerSetup`, reached through ``transport``.

    Args:
        transport: processes or Ray actors.
        setup: builds worker ``w``'s setup, when it starts and when it restarts (then with the
            current weights); the pool keeps none, so nothing large stays in this process.
        num_workers: workers.
        timeout: seconds a worker may take to answer one command (collect a batch) before it is
            deemed hung and restarted; the default grace of :meth:`shutdown`.
        start_timeout: seconds a worker may take to start (or restart); default ``timeout``.
        max_restarts: restarts allowed per worker.
        restart_seed_stride: added to a worker's seed at each restart (fresh envs, fresh seeds).
        traj_start: the first local trajectory id of every worker.
        check: called whenever answers arrive, before a failure is handled: a health check of
            what the workers depend on (a policy server), raising its error instead.
        awaiting: workers running already, waiting for their setup (worker 0 built the probe;
            the others started meanwhile).
    """

    def __init__(
        self,
        transport: Transport,
        setup: Callable[[int], WorkerSetup],
        num_workers: int,
        *,
        timeout: float,
        start_timeout: float | None = None,
        max_restarts: int,
        restart_seed_stride: int,
        traj_start: int = 0,
        check: Callable[[], None] | None = None,
        awaiting: Iterable[int] = (),
    ) -> None:
        self.transport = transport
        self.check = check
        self.stalled: Callable[[], None] | None = None  # why a worker is overdue, if not its own fault
        self._setup = setup
        self.timeout, self.max_restarts = timeout, max_restarts
        self.start_timeout = timeout if start_timeout is None else start_timeout
        self._seed_stride = restart_seed_stride
        self.num_workers = num_workers
        self.failures = FailureLog(num_workers, max_restarts, getattr(transport, "kind", "process"))
        self.restarts, self.causes = self.failures.restarts, self.failures.causes
        self.next_traj_id = [traj_start] * num_workers
        self.infos: list[WorkerInfo | None] = [None] * num_workers
        self._awaiting = set(awaiting)  # started with the probe: sent their setups at start()
        self._profile: ProfileConfig | None = None
        self._in_flight: dict[int, tuple[Any, float]] = {}  # worker -> (collect argument, sent at)
        self._stash: list[tuple[int, BatchReport]] = []  # reports arrived but not consumed
        self._starting: dict[int, tuple[float, float, bool]] = {}  # replacement -> (began, deadline, told)
        self._health_due = 0.0  # when to ask the transport's health check next
        self.started = self.closed = False
        self._closing = threading.Event()  # set first by shutdown: every wait gives up
        self._lock = threading.RLock()  # held while a worker is spawned: shutdown waits for it
        self._stopped = threading.Event()  # set once shutdown has stopped every worker
        self._owner = os.getpid()  # a forked child of this process may not use the workers

    # -- starting -------------------------------------------------------------------------------
    def start(self, profile: ProfileConfig | None = None) -> None:
        """Start every worker (profiling those ``profile`` selects); return once each is ready."""
        self.started, self._profile = True, profile
        deadline = time.monotonic() + self.start_timeout  # the workers start together
        for worker in range(self.num_workers):
            setup = dataclasses.replace(self._setup(worker), profile=profile)
            if worker in self._awaiting:
                self.transport.send(worker, ("setup", setup))
            else:
                self._spawn(worker, setup, deadline)
        self._awaiting.clear()
        for worker in range(self.num_workers):
            self._await_ready(worker, deadline)

    def _spawn(self, worker: int, setup: WorkerSetup, deadline: float, block: bool = True) -> None:
        """Start ``worker`` by ``deadline`` (a forkserver may still be importing), unless the pool
        is closing; one that a shutdown missed (it could not wait for this start) is stopped here.
        ``block=False``: the transport may go on starting it in the background (its start is
        awaited with the batches, by ``deadline``)."""
        with self._lock:
            self._check_open()
            try:
                self.transport.spawn(worker, setup, max(0.0, deadline - time.monotonic()), block=block)
            except TimeoutError:
                raise TimeoutError(f"worker {worker} did not start within start_timeout="
                                   f"{self.start_timeout} s (the forkserver starting it was still "
                                   "importing)") from None
            if self._closing.is_set():
                self.transport.stop(worker, 0.0)
                self._check_open()

    def _check_open(self) -> None:
        check_owner(self._owner, "its worker processes")
        if self.closed or self._closing.is_set():
            raise PoolClosed("the workers were shut down: build a new collector to collect more")

    def _wait(self, workers: list[int], timeout: float) -> list[tuple[int, Any]]:
        """``transport.wait`` in slices of at most :data:`_SLICE` s, giving up once the pool closes."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_open()
            answers = self.transport.wait(workers, max(0.0, min(_SLICE, deadline - time.monotonic())))
            if answers or time.monotonic() >= deadline:
                return answers

    def _await_ready(self, worker: int, deadline: float) -> None:
        problem = self._start_problem(worker, deadline)
        if problem is not None:
            failure, what = problem
            if failure is None and what.startswith("did not start"):
                raise TimeoutError(f"worker {worker} {what}")
            self._raise(worker, failure, what)

    def _start_problem(self, worker: int, deadline: float) -> tuple[WorkerFailure | None, str] | None:
        """Wait for ``worker``'s start by ``deadline``: ``None`` once it is ready, else why it did
        not start (the worker is stopped then)."""
        answers = self._wait([worker], max(0.0, deadline - time.monotonic()))
        if not answers:
            why = self._start_hint(worker)
            self.transport.stop(worker, 0.0)
            return None, f"did not start within start_timeout={self.start_timeout} s{why}"
        kind, payload = answers[0][1]
        if kind != "ready":
            self.transport.stop(worker, 0.0)
            return (payload if kind == "error" else None), _why(payload)
        self.infos[worker] = payload
        return None

    # -- commands -------------------------------------------------------------------------------
    def collect(self, worker: int, argument: Any) -> None:
        """Ask ``worker`` for a batch (sent again after a restart)."""
        check_owner(self._owner, "its worker processes")
        self._in_flight[worker] = (argument, time.monotonic())
        self.transport.send(worker, ("collect", argument))

    def request(self, worker: int, command: str, argument: Any = None) -> Any:
        """Send a control command and return the worker's answer (an error is raised)."""
        self._check_open()
        while worker in self._starting:  # a replacement answers its start first
            self._stash.extend(self._wait_in_flight([worker]))
        self.transport.send(worker, (command, argument))
        answers = self._wait([worker], self.timeout)
        if not answers:
            raise TimeoutError(f"worker {worker} did not answer {command!r} within {self.timeout} s")
        kind, payload = answers[0][1]
        if kind != "ok":  # ("refused": the command failed, the worker carries on)
            self._raise(worker, payload if kind in ("error", "refused") else None, _why(payload))
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

    def discard_pending(self) -> list[tuple[int, BatchReport]]:
        """Drop the reports arrived and not consumed (call :meth:`drain` first); return them."""
        dropped, self._stash = self._stash, []
        return dropped

    def restore_pending(self, reports: Iterable[tuple[int, BatchReport]]) -> None:
        """Take back :meth:`pending` of a saved pool: they are consumed before any new batch."""
        self._stash = list(reports) + self._stash

    def wait(self, workers: Iterable[int]) -> list[tuple[int, BatchReport]]:
        """Until at least one of ``workers`` reports a batch (several may); restart failures."""
        self._check_open()  # a shut down pool hands out no report it kept
        workers = list(workers)
        stashed = [(w, r) for w, r in self._stash if w in workers]
        if stashed:
            self._stash = [(w, r) for w, r in self._stash if w not in workers]
            return stashed
        return self._wait_in_flight([w for w in workers if w in self._in_flight])

    def wait_one(self, workers: Iterable[int]) -> tuple[int, BatchReport]:
        """Like :meth:`wait`, but one report, of the oldest weights among those that arrived
        together (a batch of weights from before an update is not held back behind one of the
        new weights); the others stay pending (and count as busy)."""
        reports = self.wait(workers)
        first = reports.pop(min(range(len(reports)), key=lambda i: reports[i][1].policy_version))
        self._stash = reports + self._stash
        return first

    def _wait_in_flight(self, workers: list[int]) -> list[tuple[int, BatchReport]]:
        """Until one of ``workers`` reports a batch; a failed worker is replaced meanwhile without
        waiting for its replacement, which joins the wait (so the others' batches keep coming)."""
        if not workers:
            raise RuntimeError("waiting for batches, but none is being collected")
        silent = getattr(self.transport, "silent", None)  # a health check of its own (Ray actors)
        while True:
            due = min(map(self._due, workers))
            if silent is not None:
                due = min(due, self._health_due)
            answers = self._wait(workers, max(0.0, due - time.monotonic()))
            if self.check is not None:
                self.check()
            reports = []
            for worker, (kind, payload) in answers:
                if worker in self._starting:
                    self._started(worker, kind, payload)
                elif kind == "done":
                    self._in_flight.pop(worker)
                    self.next_traj_id[worker] = payload.next_traj_id
                    reports.append((worker, payload))
                else:
                    self._restart(worker, payload if kind == "error" else None, _why(payload))
            for worker in workers:  # hung, not started in time, or a look at why it waits
                if worker in self._in_flight and time.monotonic() >= self._due(worker):
                    self._check_due(worker)
            if silent is not None and time.monotonic() >= self._health_due:  # every _HEALTH_EVERY s
                self._health_due = time.monotonic() + _HEALTH_EVERY
                running = [w for w in workers if w in self._in_flight and w not in self._starting]
                for worker, why in silent(running):
                    self._restart(worker, None, why)
            if reports:
                return reports

    def _due(self, worker: int) -> float:
        """When ``worker`` must have answered: its start, its batch, or a look at why it waits."""
        if worker in self._starting:
            began, deadline, told = self._starting[worker]
            return deadline if told else min(deadline, began + _TELL_AFTER)
        return self._in_flight[worker][1] + self.timeout

    def _check_due(self, worker: int) -> None:
        """Restart ``worker``, past its start or batch time, or say once why its replacement waits
        (a Ray actor waiting for resources)."""
        now = time.monotonic()
        if worker not in self._starting:
            if self.stalled is not None:  # what the worker waits for may be the cause (a server)
                self.stalled()
            self._restart(worker, None, f"no answer within timeout={self.timeout} s")
            return
        began, deadline, told = self._starting[worker]
        if now >= deadline:
            self._restart(worker, None, f"its replacement did not start within start_timeout="
                                        f"{self.start_timeout} s{self._start_hint(worker)}")
        elif not told:
            self._starting[worker] = (began, deadline, True)
            waits = getattr(self.transport, "waits_for", None)
            why = waits(worker) if waits is not None else ""
            if why:
                warnings.warn(f"rlcollect {self._noun} {worker}'s replacement has not started after "
                              f"{now - began:.1f} s{why}; the other {self._noun}s go on meanwhile, and it "
                              f"may wait up to start_timeout={self.start_timeout} s",
                              RuntimeWarning, stacklevel=outside_stacklevel())

    def _started(self, worker: int, kind: str, payload: Any) -> None:
        """The replacement of ``worker`` answered its start: it collects the lost batch again, or
        its failure takes one more restart."""
        del self._starting[worker]
        if kind != "ready":
            self._restart(worker, payload if kind == "error" else None, _why(payload))
            return
        self.infos[worker] = payload
        self.collect(worker, self._in_flight[worker][0])

    def _start_hint(self, worker: int) -> str:
        hint = getattr(self.transport, "start_hint", None)  # what the worker waits for, if known
        return hint(worker) if hint is not None else ""

    # -- failures -------------------------------------------------------------------------------
    def _restart(self, worker: int, failure: WorkerFailure | None, what: str) -> None:
        """Replace ``worker`` after it failed, without waiting for the replacement to start (its
        start is awaited with the batches: :meth:`_started`). Each failure, the replacement's
        included, takes one restart from the worker's budget; past it the last error is raised,
        with every cause in order."""
        while True:
            self._check_open()
            self.transport.stop(worker, 0.0)
            self._starting.pop(worker, None)
            what = failure.message if failure else what
            if not self.failures.count(worker, failure, what):
                self._in_flight.pop(worker, None)
                self._raise(worker, failure, what)
            warnings.warn(
                f"rlcollect {self._noun} {worker} failed ({what}); restarting it with fresh envs "
                f"(restart {self.restarts[worker]} of {self.max_restarts})",
                RuntimeWarning,
                stacklevel=outside_stacklevel(),
            )
            setup = self._setup(worker)  # built now: the current weights
            seed = None if setup.seed is None else setup.seed + self._seed_stride * self.restarts[worker]
            began = time.monotonic()
            try:
                self._spawn(worker, dataclasses.replace(
                    setup, seed=seed, traj_start=self.next_traj_id[worker], profile=self._profile),
                    began + self.start_timeout, block=False)
            except TimeoutError as error:
                failure, what = None, str(error)
                continue
            self._starting[worker] = (began, began + self.start_timeout, False)
            return

    def _raise(self, worker: int, failure: WorkerFailure | None, what: str = "") -> None:
        info = self.infos[worker]
        raise self.failures.error(worker, failure, where(info), what)

    @property
    def _noun(self) -> str:
        return self.failures.noun
