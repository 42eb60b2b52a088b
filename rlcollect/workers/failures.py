"""What the pool remembers of its workers' failures, and the error it raises past their budget.

Every failure of a worker (it died, raised, hung, or its replacement failed to start) takes one
restart from that worker's budget and is kept, in order; past the budget the final error names the
worker (or Ray actor), where it ran, every cause and the option that bounds them.

Example:
    >>> log = FailureLog(num_workers=1, max_restarts=1, kind="ray")
    >>> log.count(0, None, "ActorDiedError: the actor died")
    True
    >>> log.count(0, None, "its replacement did not start within start_timeout=30.0 s")
    False
    >>> log.error(0, None, "host-b").args[0].splitlines()[0][:60]
    'rlcollect actor 0 failed past max_actor_restarts=1: its repl'
"""

from __future__ import annotations

from rlcollect.workers.main_guard import Unrecoverable
from rlcollect.workers.worker import WorkerFailure, WorkerInfo

__all__ = ["FailureLog", "where"]


def where(info: WorkerInfo | None) -> str | None:
    """Where a worker ran: its host, and its Ray node if it is an actor."""
    if info is None:
        return None
    return f"{info.hostname} ({info.node})" if info.node else info.hostname


class FailureLog:
    """Restarts and causes per worker, against ``max_restarts``.

    Args:
        num_workers: workers.
        max_restarts: restarts allowed per worker.
        kind: the transport's kind: ``"ray"`` names actors and ``max_actor_restarts``.
    """

    def __init__(self, num_workers: int, max_restarts: int, kind: str) -> None:
        self.max_restarts = max_restarts
        self.noun = "actor" if kind == "ray" else "worker"
        self.budget = f"max_{self.noun}_restarts"
        self.restarts = [0] * num_workers
        self.causes: list[list[str]] = [[] for _ in range(num_workers)]

    def count(self, worker: int, failure: WorkerFailure | None, what: str) -> bool:
        """Count one failure of ``worker``; whether a restart is still allowed."""
        self.restarts[worker] += 1
        self.causes[worker].append(f"{failure.error_type}: {failure.message}" if failure else what)
        return self.restarts[worker] <= self.max_restarts and not isinstance(what, Unrecoverable)

    def history(self, worker: int, hostname: str | None) -> str:
        """Where the worker ran and every failure that counted against its budget, in order."""
        where = f" on {hostname}" if hostname else ""
        causes = self.causes[worker]
        if len(causes) < 2:
            return where
        listed = "; ".join(f"{number}. {cause}" for number, cause in enumerate(causes, 1))
        return f"{where} (failures, past {self.budget}={self.max_restarts}: {listed})"

    def error(self, worker: int, failure: WorkerFailure | None, hostname: str | None,
              what: str = "") -> BaseException:
        """The error to raise for ``worker``: the worker's own exception (with a note of where and
        why), else a ``RuntimeError`` naming it."""
        history = self.history(worker, hostname)
        if failure is not None and failure.error is not None and not isinstance(failure.error, Exception):
            # SystemExit, KeyboardInterrupt or another BaseException of the worker's env or policy:
            # raised as such, it would end your process silently (sys.exit's status) or as a Ctrl-C
            return RuntimeError(f"rlcollect {self.noun} {worker}: its env or policy raised "
                                f"{failure.error_type}({failure.message}), which ends a worker, not your "
                                f"process{history}\n{failure.traceback}")
        if failure is not None and failure.error is not None:
            error = failure.error
            note = f"raised in rlcollect {self.noun} {worker}{history}; its traceback:\n{failure.traceback}"
            if hasattr(error, "add_note"):  # Python >= 3.11
                error.add_note(note)
                return error
            error.__cause__ = RuntimeError(note)
            return error
        if failure is not None:
            return RuntimeError(f"{self.noun} {worker}: {failure.error_type}: {failure.message}{history}\n"
                                f"{failure.traceback}")
        what = what or (self.causes[worker][-1] if self.causes[worker] else "")
        if isinstance(what, Unrecoverable):  # restarting it would fail the same way
            return RuntimeError(f"rlcollect {self.noun} {worker} could not start: {what}")
        return RuntimeError(f"rlcollect {self.noun} {worker} failed past {self.budget}={self.max_restarts}: "
                            f"{what}{history}")
