"""The parent's side of the workers: start, command, watch, restart and stop them.

Every wait is on the pipes and the process sentinels together, with a timeout: a worker that
dies (killed, or its env raised) is noticed at once, a worker that stops answering is deemed hung
after ``timeout`` seconds. Either is restarted with fresh envs (its interrupted ``collect`` is sent
again) up to ``max_restarts`` times; after that its original exception is raised here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Iterable
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from rlcollect.rollout.profiling import ProfileConfig
from rlcollect.workers.worker import BatchReport, WorkerFailure, WorkerSetup, worker_main

__all__ = ["WorkerPool"]


class WorkerPool:
    """Worker processes running :func:`worker_main`, one per :class:`WorkerSetup`.

    Args:
        setups: one per worker.
        context: multiprocessing context (``spawn`` by default in the collectors).
        timeout: seconds a worker may take to start or to answer one command.
        max_restarts: restarts allowed per worker.
        restart_seed_stride: added to a worker's seed at each restart, so fresh envs get fresh
            seeds (``None`` seeds stay ``None``).
    """

    def __init__(
        self,
        setups: list[WorkerSetup],
        *,
        context: BaseContext,
        timeout: float,
        max_restarts: int,
        restart_seed_stride: int,
    ) -> None:
        self._setups = list(setups)
        self._context = context
        self.timeout = timeout
        self.max_restarts = max_restarts
        self._seed_stride = restart_seed_stride
        self.num_workers = len(setups)
        self.restarts = [0] * self.num_workers
        self.next_traj_id = [s.traj_start for s in setups]
        self._processes: list[BaseProcess | None] = [None] * self.num_workers
        self._conns: list[Connection | None] = [None] * self.num_workers
        self._in_flight: dict[int, tuple[Any, float]] = {}  # worker -> (collect argument, start)
        self._stash: list[tuple[int, BatchReport]] = []  # reports drained but not yet consumed
        self.closed = False

    # -- starting ---------------------------------------------------------------------------
    def start(self, profile: ProfileConfig | None = None) -> None:
        """Start every worker (profiling the ones ``profile`` selects) and wait until each is ready."""
        if profile is not None:
            self._setups = [dataclasses.replace(s, profile=profile) for s in self._setups]
        for worker in range(self.num_workers):
            self._spawn(worker)
        for worker in range(self.num_workers):
            self._await_ready(worker)

    def _spawn(self, worker: int) -> None:
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(  # type: ignore[attr-defined]
            target=worker_main,
            args=(self._setups[worker], child_end),
            name=f"rlcollect-worker-{worker}",
            daemon=False,  # envs may start processes of their own
        )
        process.start()
        child_end.close()
        self._processes[worker], self._conns[worker] = process, parent_end

    def _await_ready(self, worker: int) -> None:
        conn, process = self._conns[worker], self._processes[worker]
        assert conn is not None and process is not None
        if not wait([conn, process.sentinel], self.timeout):
            self._stop(worker)
            raise TimeoutError(f"worker {worker} did not start within timeout={self.timeout} s")
        message = self._receive(worker)
        if message[0] != "ready":
            self._stop(worker)
            self._raise(worker, message[1])

    # -- commands ---------------------------------------------------------------------------
    def send(self, worker: int, command: str, argument: Any = None) -> None:
        """Send a command; a ``collect`` is remembered so it can be re-sent after a restart."""
        conn = self._conns[worker]
        assert conn is not None
        if command == "collect":
            self._in_flight[worker] = (argument, time.monotonic())
        try:
            conn.send((command, argument))
        except (BrokenPipeError, OSError):
            if command != "collect":
                raise
            # the worker died before reading it: wait() notices the death and restarts it

    def request(self, worker: int, command: str, argument: Any = None) -> Any:
        """Send a control command and return the worker's answer (no restart on failure)."""
        self.send(worker, command, argument)
        conn, process = self._conns[worker], self._processes[worker]
        assert conn is not None and process is not None
        if not wait([conn, process.sentinel], self.timeout):
            raise TimeoutError(f"worker {worker} did not answer {command!r} within {self.timeout} s")
        kind, payload = self._receive(worker)
        if kind != "ok":
            self._raise(worker, payload)
        return payload

    def pids(self) -> list[int | None]:
        """Process ids of the workers (``None`` before start)."""
        return [p.pid if p is not None else None for p in self._processes]

    def busy(self) -> set[int]:
        """Workers with a ``collect`` in flight or a report not yet consumed."""
        return set(self._in_flight) | {w for w, _ in self._stash}

    def drain(self) -> None:
        """Wait for every ``collect`` in flight and keep the reports for :meth:`wait`."""
        while self._in_flight:
            self._stash.extend(self._wait_in_flight(list(self._in_flight)))

    def wait(self, workers: Iterable[int]) -> list[tuple[int, BatchReport]]:
        """Wait until at least one of ``workers`` reports a batch; restart the ones that fail.

        Returns:
            ``(worker, report)`` for every batch reported (possibly several).
        """
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
            waitables: dict[Any, int] = {}
            for worker in workers:
                conn, process = self._conns[worker], self._processes[worker]
                assert conn is not None and process is not None
                waitables[conn] = waitables[process.sentinel] = worker
            deadline = min(self._in_flight[w][1] for w in workers) + self.timeout
            ready = wait(list(waitables), max(0.0, deadline - time.monotonic()))
            reports: list[tuple[int, BatchReport]] = []
            for worker in sorted({waitables[obj] for obj in ready}):
                message = self._receive(worker)
                if message[0] == "done":
                    self._in_flight.pop(worker)
                    self.next_traj_id[worker] = message[1].next_traj_id
                    reports.append((worker, message[1]))
                else:
                    self._restart(worker, message[1])
            if not ready:
                for worker in workers:
                    if time.monotonic() - self._in_flight[worker][1] >= self.timeout:
                        self._restart(worker, None, reason=f"no answer within timeout={self.timeout} s")
            if reports:
                return reports

    def _receive(self, worker: int) -> tuple[str, Any]:
        conn = self._conns[worker]
        assert conn is not None
        try:
            if conn.poll():
                message: tuple[str, Any] = conn.recv()
                return message
        except (EOFError, OSError):
            pass
        process = self._processes[worker]
        assert process is not None
        process.join(1.0)
        return ("died", None)

    # -- failures ---------------------------------------------------------------------------
    def _restart(self, worker: int, failure: WorkerFailure | None, reason: str | None = None) -> None:
        if self.closed:
            raise RuntimeError("the workers were shut down")
        self._stop(worker)
        self.restarts[worker] += 1
        process = self._processes[worker]
        exit_code = process.exitcode if process is not None else None
        what = failure.message if failure else reason or f"process exited with code {exit_code}"
        if self.restarts[worker] > self.max_restarts:
            self._in_flight.pop(worker, None)
            self._raise(worker, failure, what)
        warnings.warn(
            f"rlcollect worker {worker} failed ({what}); restarting it with fresh envs "
            f"(restart {self.restarts[worker]} of {self.max_restarts})",
            RuntimeWarning,
            stacklevel=3,
        )
        setup = self._setups[worker]
        seed = None if setup.seed is None else setup.seed + self._seed_stride * self.restarts[worker]
        self._setups[worker] = dataclasses.replace(
            setup, seed=seed, traj_start=self.next_traj_id[worker]
        )
        self._spawn(worker)
        self._await_ready(worker)
        if worker in self._in_flight:  # its batch was lost: collect it again
            self.send(worker, "collect", self._in_flight[worker][0])

    def _raise(self, worker: int, failure: WorkerFailure | None, what: str = "") -> None:
        if failure is not None and failure.error is not None:
            error = failure.error
            note = f"raised in rlcollect worker {worker}; its traceback:\n{failure.traceback}"
            if hasattr(error, "add_note"):  # Python >= 3.11
                error.add_note(note)
                raise error
            raise error from RuntimeError(note)
        if failure is not None:
            raise RuntimeError(
                f"worker {worker}: {failure.error_type}: {failure.message}\n{failure.traceback}"
            )
        raise RuntimeError(f"rlcollect worker {worker} failed past max_worker_restarts: {what}")

    # -- stopping ---------------------------------------------------------------------------
    def _stop(self, worker: int, grace: float = 0.0) -> None:
        process, conn = self._processes[worker], self._conns[worker]
        if process is not None:
            if grace > 0:
                process.join(grace)
            for end in (process.terminate, process.kill):
                if process.is_alive():
                    end()
                    process.join(2.0)
        if conn is not None:
            conn.close()
            self._conns[worker] = None

    def shutdown(self, timeout: float | None = None) -> None:
        """Ask every worker to close, then terminate and kill the ones still alive; idempotent."""
        if self.closed:
            return
        self.closed = True
        for conn in self._conns:
            if conn is not None:
                with contextlib.suppress(BrokenPipeError, OSError):
                    conn.send(("close", None))
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        for worker in range(self.num_workers):
            self._stop(worker, grace=max(0.0, deadline - time.monotonic()))
        self._in_flight.clear()
