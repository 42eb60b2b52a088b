"""A worker whose envs are stepped by worker processes of its own: one Ray actor per node.

``RayCollector(collector_class=MultiSyncCollector, collector_kwargs={"num_workers": K, ...})``
gives each actor a :class:`NestedRollout` in place of a :class:`~rlcollect.rollout.engine.Rollout`:
a :class:`~rlcollect.MultiSyncCollector` of ``K`` processes on the actor's node, placed in the
outer collector's id and seed spaces (inner worker ``k`` of actor ``a`` of ``A`` is worker
``a * K + k`` of ``A * K``), so its batches need no relabelling. The actor receives the weights
through its own channel and forwards them to its processes before the next batch; every frame is
stamped with the version the actor received.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from rlcollect.collectors.options import CollectorOptions
from rlcollect.data.buffers import BatchBuffers
from rlcollect.rollout.engine import RolloutSpec
from rlcollect.rollout.episodes import EpisodeTracker
from rlcollect.workers.worker import WorkerSetup

__all__ = ["NestedRollout", "nested_spec"]


class NestedRollout:
    """What a worker needs of a ``Rollout``, served by ``num_workers`` processes of its own."""

    def __init__(self, spec: RolloutSpec, setup: WorkerSetup, *, num_workers: int,
                 collector_class: Any) -> None:
        same = {f.name for f in dataclasses.fields(RolloutSpec)} & set(CollectorOptions.__dataclass_fields__)
        options = CollectorOptions(
            **{name: getattr(spec, name) for name in same}, num_workers=num_workers,
            num_envs_per_worker=spec.num_envs, frames_per_batch=setup.num_steps * spec.num_envs * num_workers,
            return_same_td=True, placement=(setup.worker_idx, setup.num_workers, setup.traj_start),
        )
        self.collector = collector = collector_class.from_options(options)
        layout = collector.batch_layout
        if layout is None:
            collector.shutdown(0.0)
            raise ValueError("collector_class= runs the actor's envs in processes of its own through the "
                             "batch buffers, which this TorchRL env's data does not fit: leave "
                             "collector_class unset (each actor then collects tensordict by tensordict)")
        collector.worker_idx = setup.worker_idx
        self.num_envs = collector.num_envs
        self.layout = layout
        self.models: dict[str, torch.nn.Module] = collector.weight_sources
        self.episodes = EpisodeTracker(self.num_envs, env_offset=setup.worker_idx * self.num_envs,
                                       infos=layout.infos)
        self.traj_ids = self  # Worker reads traj_ids.next_local_id
        self.frames, self.collect_seconds = 0, 0.0
        self._batches = iter(collector)
        self._forwarded = 0  # weights version last forwarded to the processes

    @property
    def next_local_id(self) -> int:
        """The first local trajectory id no inner worker used yet (a restart starts there)."""
        return int(self.collector.next_trajectory_id)

    def collect(self, buffers: BatchBuffers, *, random: bool = False, policy_version: int = 0,
                stop: Any = None) -> int:
        """One batch of every process into ``buffers``, stamped ``policy_version``."""
        if policy_version != self._forwarded and self.models:
            self.collector.update_policy_weights_(weights_dict=dict.fromkeys(self.models))
            self._forwarded = policy_version
        self.collector.init_random_frames = 2**62 if random else 0  # the outer collector decides
        start = time.perf_counter()
        batch = next(self._batches)
        assert batch is not None  # no replay buffer in here
        for key in batch.keys(True, True):
            buffers.batch.get(key).copy_(batch.get(key))
        buffers.policy_version.fill_(policy_version)
        self.episodes.update(buffers.reward_np[:, :, 0], buffers.done_np[:, :, 0])
        self.episodes.label(buffers.traj_ids_np, buffers.policy_version.numpy(), buffers.infos_np)
        self.collect_seconds += time.perf_counter() - start
        self.frames += batch.numel()
        return buffers.num_steps

    def collect_batch(self, buffers: BatchBuffers | None, num_steps: int, *, random: bool = False,
                      policy_version: int = 0, stop: Any = None) -> tuple[TensorDictBase, int]:
        """The :class:`~rlcollect.rollout.build.Engine` form of :meth:`collect`."""
        assert buffers is not None  # a nested collector fills the worker's batch buffers
        return buffers.batch, self.collect(buffers, random=random, policy_version=policy_version, stop=stop)

    def set_seed(self, seed: int | None, *, new_trajectories: bool = False) -> None:
        if seed is not None:
            self.collector.set_seed(seed)

    def state_dict(self) -> dict[str, Any]:
        return {"collector": self.collector.state_dict(), "episodes": self.episodes.state_dict(),
                "frames": self.frames, "forwarded": self._forwarded}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.collector.load_state_dict(state["collector"])
        self.episodes.load_state_dict(state["episodes"])
        self.frames, self._forwarded = int(state["frames"]), int(state["forwarded"])

    def act_with_copy(self) -> torch.nn.Module | None:
        """Its policy acts in processes of its own, with the weights forwarded to them: no copy here."""
        return None

    def close(self) -> None:
        self.collector.shutdown()


def nested_spec(spec: RolloutSpec, num_workers: int, collector_class: type) -> RolloutSpec:
    """``spec`` with a :class:`NestedRollout` engine of ``num_workers`` processes when there are
    more than one (``collector_class``: the synchronous multi-process collector they run in)."""
    if num_workers == 1:
        return spec
    engine = functools.partial(NestedRollout, num_workers=num_workers, collector_class=collector_class)
    return dataclasses.replace(spec, engine=engine)
