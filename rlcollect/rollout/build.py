"""Which rollout a process runs for its env source: the engine's :class:`Rollout`, or, for a TorchRL
env whose data the batch buffers cannot hold, :class:`TensorDictRollout`."""

from __future__ import annotations

from typing import Any

from rlcollect.envs.factory import make_env_batch
from rlcollect.envs.torchrl_tensordict import TensorDictEnv
from rlcollect.policies.adapter import PolicyAdapter
from rlcollect.rollout.engine import Rollout, RolloutSpec, build_policy
from rlcollect.rollout.tensordict_loop import TensorDictRollout

__all__ = ["make_rollout"]


def make_rollout(
    spec: RolloutSpec, *, env_offset: int = 0, traj_stride: int = 1, traj_offset: int = 0,
    traj_start: int = 0, served_policy: PolicyAdapter | None = None,
) -> Rollout | TensorDictRollout:
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
    if isinstance(envs, TensorDictEnv):
        if served_policy is not None:
            envs.close()
            raise ValueError(f"a policy server reads each env's step from the batch buffers, which this "
                             f"TorchRL env's data does not fit ({envs.reason}): use MultiSyncCollector or "
                             "MultiAsyncCollector")
        return TensorDictRollout(spec, envs, **placement)
    return Rollout(spec, envs=envs, served_policy=served_policy, **placement)
