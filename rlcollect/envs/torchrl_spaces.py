"""A TorchRL env's specs as Gymnasium spaces, and the small helpers every TorchRL env batch shares.

Examples:
    >>> from torchrl.envs import GymEnv
    >>> is_torchrl_env(GymEnv("CartPole-v1")), is_torchrl_env("CartPole-v1")
    (True, False)
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

__all__ = ["OneHotSpace", "as_flag", "is_torchrl_env", "key_tuple", "prepare_env_policy", "spec_space"]


def is_torchrl_env(obj: Any) -> bool:
    """Whether ``obj`` is a TorchRL ``EnvBase`` (without importing TorchRL if it is not loaded)."""
    import sys

    module = sys.modules.get("torchrl.envs")
    return module is not None and isinstance(obj, module.EnvBase)


class OneHotSpace(spaces.Box):
    """One-hot vectors along the last axis (TorchRL's ``OneHot`` spec): a Box of 0s and 1s whose
    samples hold exactly one 1 per vector. Gymnasium's ``batch_space`` keeps the class.

    Examples:
        >>> space = OneHotSpace((3,), np.int64, seed=0)
        >>> int(space.sample().sum()), space.sample().dtype
        (1, dtype('int64'))
    """

    def __init__(
        self, shape: tuple[int, ...], dtype: Any, seed: int | np.random.Generator | None = None
    ) -> None:
        super().__init__(0, 1, shape, dtype, seed)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        index = self.np_random.integers(self.shape[-1], size=self.shape[:-1])
        return np.asarray(np.eye(self.shape[-1], dtype=self.dtype)[index])

    def contains(self, x: Any) -> bool:
        return bool(super().contains(x) and np.all(np.asarray(x).sum(-1) == 1))

    def __repr__(self) -> str:
        return f"OneHotSpace({self.shape}, {self.dtype})"


@batch_space.register(OneHotSpace)
def _batch_one_hot(space: OneHotSpace, n: int = 1) -> OneHotSpace:
    return OneHotSpace((n, *space.shape), space.dtype, seed=deepcopy(space.np_random))


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
