"""What the multi-process collectors share: workers, shared-memory slots, weights, state, stats.

The parent builds one :class:`Rollout` locally first (the probe) to learn the batch layout and to
check the policy on a dry step, closes its envs, then allocates the shared-memory slots and
starts the workers. Each worker writes its own rows ``[w * M, (w + 1) * M)`` of a slot; the
subclasses decide which slots to hand out and what to yield.
"""

from __future__ import annotations

import math
import os
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.multiprocessing
from tensordict import TensorDictBase
from tensordict.nn import InteractionType

from rlcollect.collectors._validate import (
    check_callable,
    check_device,
    check_env_device,
    check_frames,
    check_positive_int,
)
from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.delivery import make_delivery
from rlcollect.collectors.stats import CollectorStats
from rlcollect.data.buffers import BatchBuffers
from rlcollect.envs.factory import EnvSource
from rlcollect.policies.adapters import interaction_type
from rlcollect.rollout.engine import Rollout, RolloutSpec
from rlcollect.weights.forms import as_weights
from rlcollect.weights.store import WeightStore
from rlcollect.workers.pool import WorkerPool
from rlcollect.workers.worker import BatchReport, WorkerSetup, describe_unpicklable

__all__ = ["MultiCollectorBase"]

_START_METHODS = ("spawn", "forkserver", "fork")


def _per_worker(name: str, value: Any, num_workers: int) -> list[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != num_workers:
            raise ValueError(f"{name} has {len(value)} entries for num_workers={num_workers}")
        return list(value)
    return [value] * num_workers


class MultiCollectorBase(BaseCollector):
    """Base of :class:`MultiSyncCollector` and :class:`MultiAsyncCollector` (see their docs)."""

    _sync: bool  # one batch = all workers' rows (sync) or one worker's rows (async)

    def __init__(
        self,
        create_env_fn: EnvSource | Sequence[EnvSource],
        policy: Any = None,
        *,
        num_workers: int | None = None,
        num_envs_per_worker: int = 1,
        frames_per_batch: int,
        total_frames: int = -1,
        policy_factory: Callable[[], Any] | None = None,
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        init_random_frames: int | None = 0,
        max_frames_per_traj: int | None = None,
        reset_at_each_iter: bool = False,
        set_truncated: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        exploration_type: str | InteractionType = InteractionType.RANDOM,
        return_same_td: bool = False,
        device: Any = None,
        env_device: Any = None,
        policy_device: Any = None,
        storing_device: Any = None,
        compile_policy: bool | dict[str, Any] = False,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        seed: int | None = None,
        models: Mapping[str, torch.nn.Module] | None = None,
        preemptive_threshold: float | None = None,
        prefetch: bool = False,
        update_at_each_batch: bool = False,
        max_worker_restarts: int = 3,
        timeout: float = 60.0,
        start_method: str = "spawn",
        replay_buffer: Any = None,
        trajs_per_batch: int | None = None,
        traj_format: str | None = None,
    ) -> None:
        # -- arguments ----------------------------------------------------------------------
        env_fns = list(create_env_fn) if isinstance(create_env_fn, (list, tuple)) else None
        if num_workers is None:
            if env_fns is None:
                raise ValueError("num_workers is required unless create_env_fn is a list (one per worker)")
            num_workers = len(env_fns)
        self.num_workers = check_positive_int("num_workers", num_workers)
        env_fns = _per_worker("create_env_fn", env_fns or create_env_fn, self.num_workers)
        kwargs = _per_worker("create_env_kwargs", create_env_kwargs or {}, self.num_workers)
        check_positive_int("num_envs_per_worker", num_envs_per_worker)
        self.requested_frames_per_batch = check_positive_int("frames_per_batch", frames_per_batch)
        self.total_frames = check_frames("total_frames", total_frames, allow_endless=True)
        self.init_random_frames = check_frames("init_random_frames", init_random_frames or 0)
        if policy is not None and policy_factory is not None:
            raise ValueError("give policy or policy_factory, not both")
        check_callable("policy_factory", policy_factory)
        check_callable("pre_collect_hook", pre_collect_hook)
        if preemptive_threshold is not None and not 0.0 < preemptive_threshold <= 1.0:
            raise ValueError(f"preemptive_threshold must be in (0, 1] or None, got {preemptive_threshold}")
        if self._sync is False and preemptive_threshold is not None:
            raise ValueError("preemptive_threshold applies to MultiSyncCollector only")
        if start_method not in _START_METHODS:
            raise ValueError(f"start_method={start_method!r} is not one of {_START_METHODS}")
        if not isinstance(max_worker_restarts, int) or max_worker_restarts < 0:
            raise ValueError(f"max_worker_restarts must be an int >= 0, got {max_worker_restarts!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        check_env_device(env_device if env_device is not None else device)
        exploration = interaction_type(exploration_type)
        self.replay_buffer = replay_buffer
        self._delivery = make_delivery(
            return_same_td=return_same_td,
            storing_device=check_device("storing_device", storing_device or device),
            split_trajs=split_trajs, postproc=check_callable("postproc", postproc),
            post_collect_hook=check_callable("post_collect_hook", post_collect_hook),
            replay_buffer=replay_buffer, trajs_per_batch=trajs_per_batch, traj_format=traj_format,
            workers_write=True,
        )
        self.preemptive_threshold, self.prefetch = preemptive_threshold, prefetch
        self.update_at_each_batch = update_at_each_batch

        # -- the probe: layout, envs per worker, a dry step of the policy --------------------
        spec = RolloutSpec(
            env_fns[0], policy, num_envs=num_envs_per_worker,
            frames_per_batch=num_envs_per_worker, create_env_kwargs=kwargs[0],
            policy_factory=policy_factory, max_frames_per_traj=max_frames_per_traj,
            set_truncated=set_truncated, reset_at_each_iter=reset_at_each_iter,
            exploration_type=exploration,
            policy_device=check_device("policy_device", policy_device or device),
            compile_policy=compile_policy, pre_collect_hook=pre_collect_hook, models=dict(models or {}),
        )
        probe = Rollout(spec)
        probe.close()
        self.num_envs_per_worker = envs = probe.num_envs
        self.num_envs = envs * self.num_workers
        rows = self.num_envs if self._sync else envs
        num_steps = math.ceil(self.requested_frames_per_batch / rows)
        self.frames_per_batch = num_steps * rows
        self._reference_models = {k: m for k, m in probe.models.items()}  # pulled on update()
        self._layout = probe.layout

        # -- what travels to the workers ----------------------------------------------------
        specs = []
        for worker in range(self.num_workers):
            worker_spec = RolloutSpec(**{**spec.__dict__, "create_env_fn": env_fns[worker],
                                         "create_env_kwargs": kwargs[worker],
                                         "frames_per_batch": num_steps * envs})
            describe_unpicklable({
                f"create_env_fn[{worker}]": env_fns[worker], "policy": policy,
                "policy_factory": policy_factory, "pre_collect_hook": pre_collect_hook,
                "models": dict(models or {}), f"create_env_kwargs[{worker}]": kwargs[worker],
            })
            specs.append(cloudpickle.dumps(worker_spec))
        num_slots = 2 if (prefetch or not self._sync) else 1
        masked = preemptive_threshold is not None
        self._slots = [
            BatchBuffers.allocate(self._layout, self.num_envs, num_steps, shared=True, masked=masked)
            for _ in range(num_slots)
        ]
        self._stop_flags = torch.zeros(num_slots, dtype=torch.uint8).share_memory_()
        if self._delivery.written_elsewhere and hasattr(replay_buffer, "init"):
            replay_buffer.init(self._slots[0].batch[:1])  # laid out before the workers get it
        context = torch.multiprocessing.get_context(start_method)
        self._store = WeightStore(self._reference_models, self.num_workers)
        setups = [
            WorkerSetup(
                worker_idx=w, num_workers=self.num_workers, spec_bytes=specs[w],
                env_offset=w * envs, seed=seed, traj_start=0,
                slots=tuple(slot.storage[w * envs:(w + 1) * envs] for slot in self._slots),
                stop_flags=self._stop_flags, weights=self._store.worker_view(w),
                replay_buffer=replay_buffer if self._delivery.written_elsewhere else None,
            )
            for w in range(self.num_workers)
        ]
        self._parent_threads = torch.get_num_threads()
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - self.num_workers))
        self._pool = WorkerPool(
            setups, context=context, timeout=float(timeout), max_restarts=max_worker_restarts,
            restart_seed_stride=self.num_envs,
        )
        self._finalizer = weakref.finalize(self, _shutdown, self._pool, self._parent_threads)
        self._started = False
        self._frames = self._batches = 0
        self._worker_reports: list[BatchReport | None] = [None] * self.num_workers
        self._returns: deque[float] = deque(maxlen=100)
        self._lengths: deque[int] = deque(maxlen=100)
        self._last_version_lag = 0
        self._seed = seed

    # -- workers ---------------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._pool.closed:
            raise RuntimeError("the collector was shut down")
        if not self._started:
            self._started = True
            self._pool.start(profile=self._profile_config)

    def _dispatch(self, worker: int, slot: int) -> None:
        if self.update_at_each_batch:
            self.update_policy_weights_(worker_ids=[worker])
        written = int(getattr(self.replay_buffer, "write_count", self._frames))
        random = written < self.init_random_frames
        self._pool.send(worker, "collect", (slot, random))

    def _account(self, worker: int, report: BatchReport) -> int:
        """Record a worker's report; return the frames of that batch."""
        self._worker_reports[worker] = report
        self._returns.extend(report.returns)
        self._lengths.extend(report.lengths)
        self._last_version_lag = int(self._store.versions[worker]) - report.policy_version
        return report.steps * self.num_envs_per_worker

    def _quiesce(self) -> None:
        self._pool.drain()  # batches under way finish (and are written); no new one is handed out

    def _more_wanted(self, frames_in_flight: int) -> bool:
        return self.total_frames < 0 or self._frames + frames_in_flight < self.total_frames

    @property
    def worker_pids(self) -> list[int | None]:
        """Process ids of the workers (they start with the first batch or ``set_seed``)."""
        return self._pool.pids()

    # -- weights ---------------------------------------------------------------------------
    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        self._store.check_model_ids(forms)
        ids = list(range(self.num_workers)) if worker_ids is None else worker_ids
        bad = [w for w in ids if not 0 <= w < self.num_workers]
        if bad:
            raise ValueError(f"worker_ids {bad} out of range for num_workers={self.num_workers}")
        weights = {
            model_id: as_weights(self._reference_models[model_id] if source is None else source)
            for model_id, source in forms.items()
        }
        self._store.push(weights, ids)

    # -- seeding and state -----------------------------------------------------------------
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Env ``i`` of worker ``w`` is reset now with ``seed + w * num_envs_per_worker + i``.

        Returns:
            ``seed`` plus the number of envs of all workers.
        """
        self._ensure_started()
        self._pool.drain()
        for worker in range(self.num_workers):
            self._pool.request(worker, "seed", (seed, self._batches > 0))
        return seed + self.num_envs

    def state_dict(self) -> dict[str, Any]:
        """Every worker's state (after the batches in flight complete) and the parent's counters."""
        self._ensure_started()
        self._pool.drain()
        return {
            "frames": self._frames,
            "batches": self._batches,
            "versions": self._store.versions.clone(),
            "next_traj_id": list(self._pool.next_traj_id),
            "workers": [self._pool.request(w, "state_dict") for w in range(self.num_workers)],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore every worker and the counters from :meth:`state_dict`."""
        self._ensure_started()
        self._pool.drain()
        self._frames, self._batches = int(state_dict["frames"]), int(state_dict["batches"])
        self._store.versions.copy_(state_dict["versions"])
        self._pool.next_traj_id = list(state_dict["next_traj_id"])
        for worker, state in enumerate(state_dict["workers"]):
            self._pool.request(worker, "load_state_dict", state)

    def stats(self) -> CollectorStats:
        workers = []
        for worker, report in enumerate(self._worker_reports):
            frames = report.frames if report else 0
            seconds = report.collect_seconds if report else 0.0
            workers.append(CollectorStats(
                frames=frames, fps=frames / seconds if seconds else 0.0,
                episodes=report.episodes if report else 0,
                restarts=self._pool.restarts[worker],
                policy_version=report.policy_version if report else 0,
            ))
        return CollectorStats(
            frames=self._frames,
            batches=self._batches,
            fps=sum(w.fps for w in workers),
            episodes=sum(w.episodes for w in workers),
            mean_return=float(np.mean(self._returns)) if self._returns else math.nan,
            mean_length=float(np.mean(self._lengths)) if self._lengths else math.nan,
            restarts=sum(self._pool.restarts),
            policy_version=int(self._store.versions.max()),
            policy_lag=self._last_version_lag,
            workers=tuple(workers),
        )

    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Stop the workers (close, join, terminate, kill, bounded by ``timeout``); idempotent."""
        self._stop_background(timeout)
        self._finalizer.detach()
        _shutdown(self._pool, self._parent_threads, timeout)


def _shutdown(pool: WorkerPool, parent_threads: int, timeout: float | None = None) -> None:
    if not pool.closed:
        pool.shutdown(timeout)
        torch.set_num_threads(parent_threads)
