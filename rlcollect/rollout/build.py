"""Which rollout a process runs for its env source: the engine's :class:`Rollout`, or, for a TorchRL
env whose data the batch buffers cannot hold, :class:`TensorDictRollout`; both are an
:class:`Engine`, which is all a collector or a worker asks of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import BatchLayout
from rlcollect.data.trajectories import TrajectoryIds
from rlcollect.envs.factory import make_env_batch
from rlcollect.envs.torchrl_tensordict import TensorDictEnv
from rlcollect.policies.adapter import PolicyAdapter
from rlcollect.rollout.engine import Rollout, RolloutSpec, build_policy
from rlcollect.rollout.episodes import EpisodeTracker
from rlcollect.rollout.tensordict_loop import TensorDictRollout

__all__ = ["Engine", "make_rollout"]


class Engine(Protocol):
    """What a collector or a worker asks of its rollout (:class:`Rollout`, :class:`TensorDictRollout`,
    a nested collector's :class:`~rlcollect.collectors.nested.NestedRollout`).

    ``layout`` is the batch buffers' layout, or ``None`` when batches are the env's own
    TensorDicts (no buffers: :meth:`collect_batch` makes each batch); the counters (``frames``,
    ``batches``, ``collect_seconds``), ``episodes`` and ``traj_ids`` are the rollout's since it
    started."""

    spec: RolloutSpec
    envs: Any
    num_envs: int
    models: dict[str, torch.nn.Module]
    policy: Any
    user_policy: Any
    frames: int
    batches: int
    collect_seconds: float
    episodes: EpisodeTracker
    traj_ids: TrajectoryIds

    @property
    def layout(self) -> BatchLayout | None: ...

    def collect_batch(self, buffers: BatchBuffers | None, num_steps: int, *, random: bool = False,
                      policy_version: int = 0, stop: np.ndarray | None = None) -> tuple[TensorDictBase, int]:
        """Collect one batch (into ``buffers`` when the engine has a layout); the batch and the
        steps taken (``num_steps`` unless ``stop`` cut it short)."""

    def set_check(self, check: str) -> None: ...
    def reset(self) -> None: ...
    def set_seed(self, seed: int | None, *, new_trajectories: bool = False) -> None: ...
    def module(self, model_id: str) -> torch.nn.Module: ...
    def act_with_copy(self) -> torch.nn.Module | None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
    def close(self) -> None: ...


def make_rollout(
    spec: RolloutSpec, *, env_offset: int = 0, traj_stride: int = 1, traj_offset: int = 0,
    traj_start: int = 0, served_policy: PolicyAdapter | None = None,
) -> Engine:
    """The rollout of one process for ``spec`` (its envs built here); the keyword arguments are
    :class:`Rollout`'s (a served policy needs the batch buffers: refused for a :class:`TensorDictEnv`).

    Examples:
        >>> type(make_rollout(RolloutSpec("CartPole-v1"))).__name__
        'Rollout'
    """
    policy = None if served_policy is not None else build_policy(spec)  # the env may take its transforms
    envs = make_env_batch(spec.create_env_fn, spec.num_envs, dict(spec.create_env_kwargs or {}),
                          spec.max_frames_per_traj, policy=policy,
                          register_policy_transforms=spec.register_policy_transforms)
    placement: dict[str, Any] = {"env_offset": env_offset, "traj_stride": traj_stride,
                                 "traj_offset": traj_offset, "traj_start": traj_start, "user_policy": policy}
    try:
        if not isinstance(envs, TensorDictEnv):
            return Rollout(spec, envs=envs, served_policy=served_policy, **placement)
        if spec.info_keys:
            raise ValueError(f"info_keys={list(spec.info_keys)} with a TorchRL env: its step infos reach the "
                             "batch through the env's own info_dict_reader (GymEnv.set_info_dict_reader); "
                             "leave info_keys out")
        if served_policy is not None:
            raise ValueError(f"a policy server reads each env's step from the batch buffers, which this "
                             f"TorchRL env's data does not fit ({envs.reason}): use MultiSyncCollector or "
                             "MultiAsyncCollector")
        return TensorDictRollout(spec, envs, **placement)
    except BaseException:  # refused (a policy, a layout, an info key): the envs (threads, processes) closed
        envs.close()
        raise
