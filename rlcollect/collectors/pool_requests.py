"""What a collector with workers asks of them besides batches (seeds, states, counters, weights,
calls on their attributes), and what it tells another collector
built on it (its batch layout, its weight sources, its next trajectory id).

Examples:
    >>> from rlcollect import MultiSyncCollector
    >>> with MultiSyncCollector("CartPole-v1", num_workers=2, frames_per_batch=8) as collector:
    ...     collector.call_workers("worker_idx")
    [0, 1]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlcollect.collectors.pooled_state import PooledState
from rlcollect.collectors.remote import worker_entries
from rlcollect.collectors.stats import CollectorStats
from rlcollect.collectors.stream import between_batches
from rlcollect.common.state import checked_state, stamped
from rlcollect.data.layout import BatchLayout
from rlcollect.envs.base import check_envs_data
from rlcollect.weights.forms import check_model_ids
from rlcollect.weights.schemes import NoWeightSyncScheme
from rlcollect.workers.saved_reports import report_from_state, report_state
from rlcollect.workers.wire import pack

__all__ = ["WorkerRequests"]


class WorkerRequests(PooledState):
    """Seeds, states, stats and remote calls of a collector's workers (a part of
    :class:`~rlcollect.collectors.pooled.PooledCollector`)."""

    # -- calls on the workers --------------------------------------------------------------------
    def call_workers(self, path: str, args: Sequence[Sequence[Any]] | None = None,
                     kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        """Read (``args`` None) or call the attribute at ``path`` of each worker's
        :class:`~rlcollect.workers.worker.WorkerView` (``"worker_idx"``, ``"replay_buffer.write_count"``,
        ``"policy"``, ...), with worker ``i``'s entry of ``args`` and ``kwargs``; the results in worker
        order, once the batches under way finish. A path that fails raises here; the worker carries on.

        Raises:
            ValueError: ``args`` or ``kwargs`` does not have one entry per worker.
        """
        entries, keywords = worker_entries(self.num_workers, args, kwargs)
        self._ensure_started()
        self._pool.drain()
        return [self._pool.request(worker, "call", (path, entries[worker], keywords[worker]))
                for worker in range(self.num_workers)]

    # -- seeding and state ------------------------------------------------------------------------
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Env ``i`` of worker ``w`` is reset now with ``seed + w * num_envs_per_worker + i``.
        Every batch handed out after it is collected after it: an asynchronous worker's batch
        collected ahead (while the last one was used) and not handed out yet is dropped, not
        counted, and collected again from the reseeded envs (as TorchRL's asynchronous collectors
        do), so that the batches after ``set_seed(s)`` are those of a collector seeded ``s``.

        Returns:
            ``seed`` plus the number of envs of all workers.
        """
        self._ensure_started()
        self._pool.drain()
        if not self.sync:
            for worker, report in self._pool.discard_pending():
                self._weights.release(worker)
                self._redo[worker] = report.slot  # free again: the worker collects into it anew
        for worker in range(self.num_workers):
            self._pool.request(worker, "seed", (seed, self._batches > 0))
        return seed + self.num_envs

    def reset(self, reset_idx: Sequence[bool] | None = None) -> None:
        """Reset the envs of every worker now (unseeded), or of the workers ``reset_idx`` marks
        (one flag per worker): their next batches start new trajectories. A batch a worker
        collected before is still yielded first (asynchronous collectors); trajectories held for
        ``trajs_per_batch`` are dropped.

        Raises:
            ValueError: ``reset_idx`` does not hold one True/False flag per worker.
        """
        flags = [True] * self.num_workers if reset_idx is None else list(reset_idx)
        if len(flags) != self.num_workers or any(flag not in (True, False) for flag in flags):
            raise ValueError(f"reset_idx={reset_idx!r}: expected one True/False flag per worker "
                             f"({self.num_workers}), or None for all")
        self._ensure_started()
        self._pool.drain()
        for worker in range(self.num_workers):
            if flags[worker]:
                self._pool.request(worker, "seed", (None, True))  # no seed: reset, new trajectories
        self._delivery.drop_pending()

    @property
    def policy(self) -> Any:
        """The policy given (the workers run copies of it; ``None`` with only a ``policy_factory``)."""
        return self.options.policy

    def state_dict(self) -> dict[str, Any]:
        """Every worker's state after its batch in flight, those batches, and the counters.

        A collector loaded with it yields the batches that were in flight first, then continues:
        the same frames as the uninterrupted run. From another thread, it is taken once the batch
        under way is handed out.
        """
        with between_batches(self._busy, self.options.timeout, "state_dict()"):
            return self._state_between_batches()

    def _state_between_batches(self) -> dict[str, Any]:
        self._ensure_started()
        self._pool.drain()
        pending = []
        for worker, report in self._pool.pending():
            if report.data is None and report.batch is None and not self._delivery.written_elsewhere:
                report = dataclasses.replace(report, data=pack(self._rows(report.slot, worker).clone()))
            pending.append((worker, report_state(report)))
        return stamped(self._state_kind, {
            "frames": self._frames,
            "batches": self._batches,
            "weights": self._weights.state_dict(),
            "next_traj_id": list(self._pool.next_traj_id),
            "pending": pending,
            "workers": [self._pool.request(w, "state_dict") for w in range(self.num_workers)],
        })

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore every worker, the batches in flight and the counters from :meth:`state_dict`.

        Raises:
            TypeError, ValueError: not this collector class's state, or one of another number of
                workers (each named); nothing is changed then.
        """
        state_dict = checked_state(self._state_kind, state_dict, self._state_keys)
        workers = list(state_dict["workers"])
        if len(workers) != self.num_workers or len(state_dict["next_traj_id"]) != self.num_workers:
            raise ValueError(f"{self._state_kind}.load_state_dict: the state holds {len(workers)} workers, "
                             f"this collector has num_workers={self.num_workers}")
        for worker in workers:  # before anything changes: no worker is sent bytes to unpickle
            rollout = worker.get("rollout") if isinstance(worker, Mapping) else None
            check_envs_data(rollout.get("envs") if isinstance(rollout, Mapping) else None)
        self._ensure_started()
        self._pool.drain()
        self._weights.load_state_dict(state_dict["weights"])  # checked whole first: another model refused
        self._frames, self._batches = int(state_dict["frames"]), int(state_dict["batches"])
        self._pool.next_traj_id = list(state_dict["next_traj_id"])
        for worker, state in enumerate(workers):
            self._pool.request(worker, "load_state_dict", state)
        self._pool.restore_pending([(worker, report_from_state(report))
                                    for worker, report in state_dict["pending"]])

    def stats(self) -> CollectorStats:
        workers = []
        for worker, report in enumerate(self._reports):
            frames = report.frames if report else 0
            seconds = report.collect_seconds if report else 0.0
            workers.append(CollectorStats(
                frames=frames, fps=frames / seconds if seconds else 0.0,
                episodes=report.episodes if report else 0, restarts=self._pool.restarts[worker],
                policy_version=report.policy_version if report else 0,
            ))
        # batches finished but not handed out yet (drained by pause(): already in a workers' buffer)
        pending = [report for _, report in self._pool.pending()]
        return CollectorStats(
            frames=self._frames + sum(r.steps for r in pending) * self.num_envs_per_worker,
            batches=self._batches + (len(pending) if not self.sync else len(pending) // self.num_workers),
            fps=sum(w.fps for w in workers),
            episodes=sum(w.episodes for w in workers),
            mean_return=float(np.mean(self._returns)) if self._returns else math.nan,
            mean_length=float(np.mean(self._lengths)) if self._lengths else math.nan,
            restarts=sum(self._pool.restarts),
            policy_version=int(max(self._weights.versions)),
            policy_lag=self._last_lag,
            startup_seconds=self._startup_seconds,
            workers=tuple(workers),
        )

    # -- what another collector built from these options reads ------------------------------------
    @property
    def batch_layout(self) -> BatchLayout | None:
        """The layout of the slots the workers fill (``None``: a TorchRL env's data, which each
        worker sends back whole)."""
        return self._slots[0].layout if self._slots else None

    @property
    def weight_sources(self) -> dict[str, torch.nn.Module]:
        """The modules, by model id, that ``update_policy_weights_()`` reads the weights from."""
        return self._models

    @property
    def next_trajectory_id(self) -> int:
        """The first local trajectory id no worker used yet (where a restart starts)."""
        return max(self._pool.next_traj_id)

    # -- weights ----------------------------------------------------------------------------------
    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        schemes = self._weight_sync_schemes or {}
        check_model_ids(forms, schemes)
        ids = list(range(self.num_workers)) if worker_ids is None else worker_ids
        weights = {}
        for model_id, source in forms.items():
            if not isinstance(schemes[model_id], NoWeightSyncScheme):
                weights[model_id] = schemes[model_id].prepare_weights(source)  # None: this process's module
        if weights:
            self._weights.push(weights, ids)
        self._weights_sent()

    def _weights_sent(self) -> None:
        self._unsent.sent()

    def _model_ids(self) -> list[str]:
        return list(self._models)

    def receiver_model(self, model_id: str) -> torch.nn.Module:
        return self._models[model_id]
