"""Which rollout a process runs for its env source: the engine's :class:`Rollout`, or, for a TorchRL
env whose data the batch buffers cannot hold, :class:`TensorDictRollout`."""

from __future__ import annotations

from rlcollect.envs.factory import make_env_batch
from rlcollect.envs.torchrl_env import TensorDictEnv
from rlcollect.rollout.engine import Rollout, RolloutSpec
from rlcollect.rollout.tensordict_loop import TensorDictRollout

__all__ = ["make_rollout"]


def make_rollout(spec: RolloutSpec) -> Rollout | TensorDictRollout:
    """The rollout of one process for ``spec`` (its envs built here).

    Examples:
        >>> type(make_rollout(RolloutSpec("CartPole-v1"))).__name__
        'Rollout'
    """
    envs = make_env_batch(spec.create_env_fn, spec.num_envs, dict(spec.create_env_kwargs or {}),
                          spec.max_frames_per_traj)
    if isinstance(envs, TensorDictEnv):
        return TensorDictRollout(spec, envs)
    return Rollout(spec, envs=envs)
