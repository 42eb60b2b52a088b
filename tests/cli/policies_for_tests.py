"""Policy factories for the ``--policy`` tests: ``factory(observation_space, action_space)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from torch import nn

NOT_CALLABLE = 42


class AlwaysZero(nn.Module):
    """Action 0 for every env: observations ``[N, *obs]`` -> actions ``[N]``."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.zeros(observation.shape[0], dtype=torch.int64)


def always_zero(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> nn.Module:
    """A policy that always picks action 0 of a Discrete action space."""
    assert isinstance(observation_space, gym.spaces.Box), observation_space
    assert isinstance(action_space, gym.spaces.Discrete), action_space
    return AlwaysZero()


def broken_factory(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> nn.Module:
    """A factory that fails, as one would on a machine it was not written for."""
    raise RuntimeError("this factory needs a GPU")


def wrong_shape(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> Any:
    """A policy whose actions do not fit the action space (one float per env)."""
    return lambda observation: torch.zeros(observation.shape[0], 3)


class ZerosThen(nn.Module):
    """Action 0, until call number ``calls``: from then on ``then(observation)`` (a Ctrl-C, bad data)."""

    def __init__(self, calls: int, then: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.calls_left, self.then = calls, then

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        self.calls_left -= 1
        if self.calls_left < 0:
            return self.then(observation)
        return torch.zeros(observation.shape[0], dtype=torch.int64)


def _ctrl_c(observation: torch.Tensor) -> torch.Tensor:
    raise KeyboardInterrupt


def interrupt_in_third_batch(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> nn.Module:
    """Ctrl-C during the third batch of 32 steps (after the collector's one dry call)."""
    return ZerosThen(calls=1 + 2 * 32 + 5, then=_ctrl_c)


class Float64Input(nn.Module):
    """A float32 layer fed float64 observations, as a float32 network on MuJoCo's observations."""

    def __init__(self, num_obs: int) -> None:
        super().__init__()
        self.layer = nn.Linear(num_obs, 2)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.layer(observation.double()).argmax(-1)


def float64_input(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> nn.Module:
    """A policy whose first call raises (``mat1 and mat2 must have the same dtype``)."""
    assert observation_space.shape is not None
    return Float64Input(observation_space.shape[0])


def float_actions_in_third_batch(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> Any:
    """Float actions with a fraction (0.5) from step 5 of the third batch of 32 steps (after the
    collector's dry call)."""
    return ZerosThen(calls=1 + 2 * 32 + 5, then=lambda observation: torch.full((observation.shape[0],), 0.5))


def tilt(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> nn.Module:
    """A deterministic CartPole policy (push towards the pole's tilt): runs compare frame for frame."""
    from tests.envs_for_tests import TiltPolicy

    return TiltPolicy()
