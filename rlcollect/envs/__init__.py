"""Envs layer: adapters that step environments straight into the batch buffers."""

from rlcollect.envs.base import EnvBatch
from rlcollect.envs.factory import EnvSource, make_env_batch
from rlcollect.envs.gym_envs import GymEnvs
from rlcollect.envs.vector import GymVectorEnv

__all__ = ["EnvBatch", "EnvSource", "GymEnvs", "GymVectorEnv", "make_env_batch"]
