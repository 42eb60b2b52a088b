"""What a collector with workers asks of them besides batches: seeds, resets, calls on their
attributes, states and counters (the methods of
:class:`~rlcollect.collectors.pooled.PooledCollector` of those names hand them here).

Examples:
    >>> from rlcollect import MultiSyncCollector
    >>> with MultiSyncCollector("CartPole-v1", num_workers=2, frames_per_batch=8) as collector:
    ...     collector.call_workers("worker_idx")
    [0, 1]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rlcollect.collectors.pool_batches import Schedule
from rlcollect.collectors.stats import CollectorStats
from rlcollect.common.state import checked_state, stamped
from rlcollect.data.attributes import worker_entries
from rlcollect.envs.base import check_envs_data
from rlcollect.workers.saved_reports import report_from_state, report_state
from rlcollect.workers.wire import pack

__all__ = ["WorkerRequests"]


class WorkerRequests:
    """Seeds, resets, calls, states and stats of a collector's workers, over its schedule's pool.

    ``ensure_started`` starts the workers (at the first request); a state is stamped
    ``state_kind`` and holds ``state_keys``."""

    def __init__(self, schedule: Schedule, ensure_started: Callable[[], None], *, state_kind: str,
                 state_keys: tuple[str, ...]) -> None:
        self.schedule, self.pool = schedule, schedule.pool
        self.num_workers = schedule.num_workers
        self.ensure_started = ensure_started
        self.state_kind, self.state_keys = state_kind, state_keys

    def _between_batches(self) -> None:
        self.ensure_started()
        self.pool.drain()  # batches under way finish (and are written); no new one is handed out

    def call_workers(self, path: str, args: Sequence[Sequence[Any]] | None,
                     kwargs: Sequence[Mapping[str, Any]] | None) -> list[Any]:
        """Each worker's attribute at ``path``, read or called (``BaseCollector.call_workers``)."""
        entries, keywords = worker_entries(self.num_workers, args, kwargs)
        self._between_batches()
        return [self.pool.request(worker, "call", (path, entries[worker], keywords[worker]))
                for worker in range(self.num_workers)]

    def set_seed(self, seed: int) -> None:
        """Reseed every worker's envs now; batches collected ahead are dropped first."""
        self._between_batches()
        self.schedule.drop_ahead()
        for worker in range(self.num_workers):
            self.pool.request(worker, "seed", (seed, self.schedule.batches > 0))

    def reset(self, reset_idx: Sequence[bool] | None) -> None:
        """Reset the envs of the workers ``reset_idx`` marks (all: ``None``), unseeded."""
        flags = [True] * self.num_workers if reset_idx is None else list(reset_idx)
        if len(flags) != self.num_workers or any(flag not in (True, False) for flag in flags):
            raise ValueError(f"reset_idx={reset_idx!r}: expected one True/False flag per worker "
                             f"({self.num_workers}), or None for all")
        self._between_batches()
        for worker in range(self.num_workers):
            if flags[worker]:
                self.pool.request(worker, "seed", (None, True))  # no seed: reset, new trajectories
        self.schedule.delivery.drop_pending()

    def state_dict(self) -> dict[str, Any]:
        """Every worker's state after its batch in flight, those batches, and the counters."""
        self._between_batches()
        schedule, pending = self.schedule, []
        for worker, report in self.pool.pending():
            if report.data is None and report.batch is None and not schedule.delivery.written_elsewhere:
                rows = schedule.slots.rows(report.slot, worker).clone()
                report = dataclasses.replace(report, data=pack(rows))
            pending.append((worker, report_state(report)))
        return stamped(self.state_kind, {
            "frames": schedule.frames,
            "batches": schedule.batches,
            "weights": schedule.weights.state_dict(),
            "next_traj_id": list(self.pool.next_traj_id),
            "pending": pending,
            "workers": [self.pool.request(w, "state_dict") for w in range(self.num_workers)],
        })

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the workers, the batches in flight and the counters; a state of another class
        or number of workers is refused before anything changes."""
        state_dict = checked_state(self.state_kind, state_dict, self.state_keys)
        workers = list(state_dict["workers"])
        if len(workers) != self.num_workers or len(state_dict["next_traj_id"]) != self.num_workers:
            raise ValueError(f"{self.state_kind}.load_state_dict: the state holds {len(workers)} workers, "
                             f"this collector has num_workers={self.num_workers}")
        for worker in workers:  # before anything changes: no worker is sent bytes to unpickle
            rollout = worker.get("rollout") if isinstance(worker, Mapping) else None
            check_envs_data(rollout.get("envs") if isinstance(rollout, Mapping) else None)
        self._between_batches()
        schedule = self.schedule
        schedule.weights.load_state_dict(state_dict["weights"])  # checked whole first: another model refused
        schedule.frames, schedule.batches = int(state_dict["frames"]), int(state_dict["batches"])
        self.pool.next_traj_id = list(state_dict["next_traj_id"])
        for worker, state in enumerate(workers):
            self.pool.request(worker, "load_state_dict", state)
        self.pool.restore_pending([(worker, report_from_state(report))
                                   for worker, report in state_dict["pending"]])

    def stats(self, startup_seconds: float) -> CollectorStats:
        """The counters, with each worker's."""
        schedule, workers = self.schedule, []
        for worker, report in enumerate(schedule.reports):
            frames = report.frames if report else 0
            seconds = report.collect_seconds if report else 0.0
            workers.append(CollectorStats(
                frames=frames, fps=frames / seconds if seconds else 0.0,
                episodes=report.episodes if report else 0, restarts=self.pool.restarts[worker],
                policy_version=report.policy_version if report else 0,
            ))
        # batches finished but not handed out yet (drained by pause(): already in a workers' buffer)
        pending = [report for _, report in self.pool.pending()]
        return CollectorStats(
            frames=schedule.frames + sum(r.steps for r in pending) * schedule.slots.envs_per_worker,
            batches=schedule.batches + schedule.pending_batches(len(pending)),
            fps=sum(w.fps for w in workers),
            episodes=sum(w.episodes for w in workers),
            mean_return=float(np.mean(schedule.returns)) if schedule.returns else math.nan,
            mean_length=float(np.mean(schedule.lengths)) if schedule.lengths else math.nan,
            restarts=sum(self.pool.restarts),
            policy_version=int(max(schedule.weights.versions)),
            policy_lag=schedule.last_lag,
            startup_seconds=startup_seconds,
            workers=tuple(workers),
        )
