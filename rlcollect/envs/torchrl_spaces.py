"""A TorchRL env's specs as Gymnasium spaces, and the small helpers every TorchRL env batch shares.

Examples:
    >>> from torchrl.envs import GymEnv
    >>> is_torchrl_env(GymEnv("CartPole-v1")), is_torchrl_env("CartPole-v1")
    (True, False)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlcollect.data.layout import OneHotSpace

__all__ = ["OneHotSpace", "as_flag", "is_torchrl_env", "key_tuple", "prepare_env_policy", "spec_space"]


def is_torchrl_env(obj: Any) -> bool:
    """Whether ``obj`` is a TorchRL ``EnvBase`` (without importing TorchRL if it is not loaded)."""
    import sys

    module = sys.modules.get("torchrl.envs")
    return module is not None and isinstance(obj, module.EnvBase)


def spec_space(spec: Any, key: str) -> spaces.Space[Any]:
    from torchrl.data import Binary, Bounded, Categorical, Composite, OneHot, Unbounded

    if isinstance(spec, Composite):
        return spaces.Dict({k: spec_space(spec[k], k) for k in list(spec.keys())})
    dtype = np.dtype(str(spec.dtype).replace("torch.", ""))
    shape = tuple(spec.shape)
    if isinstance(spec, OneHot):
        return OneHotSpace(shape, dtype)
    if dtype == np.bool_ and isinstance(spec, (Categorical, Binary)):  # flags (InitTracker's is_init)
        return spaces.Box(0, 1, shape, np.bool_)
    if isinstance(spec, Categorical):
        if shape:
            return spaces.MultiDiscrete(np.full(shape, spec.space.n))
        return spaces.Discrete(spec.space.n)
    if isinstance(spec, Binary):
        return spaces.MultiBinary(shape)
    integer = np.issubdtype(dtype, np.integer)
    # integer counters (step_count) may span int64: keep bounds numpy can sample between
    limit = np.int64(2**31 - 1) if integer else np.inf
    if isinstance(spec, Bounded):
        low = np.maximum(spec.space.low.cpu().numpy(), -limit - 1).astype(dtype)
        high = np.minimum(spec.space.high.cpu().numpy(), limit).astype(dtype)
        return spaces.Box(low, high, shape, dtype)
    if isinstance(spec, Unbounded):
        return spaces.Box(-limit - (1 if integer else 0), limit, shape, dtype)
    raise TypeError(f"{key}: TorchRL spec {type(spec).__name__} is not supported")


def prepare_env_policy(env: Any, policy: Any) -> None:
    """As TorchRL's collectors do: a ``RandomPolicy()`` takes the env's action spec, exploration
    modules built without a spec take it too."""
    from torchrl.modules import set_exploration_modules_spec_from_env

    if callable(getattr(policy, "set_action_spec_from_env", None)):
        policy.set_action_spec_from_env(env)
    if isinstance(policy, torch.nn.Module):
        set_exploration_modules_spec_from_env(policy, env)


def as_flag(value: torch.Tensor) -> torch.Tensor:
    """A done flag as bool (an env may declare its flags with a float or int spec, as TorchRL
    allows): set where non-zero."""
    return value if value.dtype is torch.bool else value != 0


def key_tuple(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)
