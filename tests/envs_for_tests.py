"""Small envs and policies the tests share: written plainly so each test can state what it expects."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit


class DictObsEnv(gym.Env[dict[str, Any], int]):
    """Dict observations; episodes end by termination (|x| > 2) or by a 12-step time limit.

    The reset observation has ``count == 0`` and the final one ``count > 0``, so a batch that
    stored a reset observation as the final one is caught.
    """

    observation_space = spaces.Dict(
        {"pos": spaces.Box(-10.0, 10.0, (2,), np.float32), "count": spaces.Discrete(100)}
    )
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1, 1, size=2).astype(np.float32)
        self._count = 0
        return self._obs(), {}

    def step(self, action: int) -> Any:
        move = 0.5 if action else -0.5
        self._pos = (self._pos + move + self.np_random.normal(0, 0.3, 2)).astype(np.float32)
        self._count += 1
        return self._obs(), float(self._pos[1]), bool(abs(self._pos[0]) > 2.0), False, {}

    def _obs(self) -> dict[str, Any]:
        return {"pos": self._pos.copy(), "count": self._count}


def make_dict_env() -> gym.Env[Any, Any]:
    return TimeLimit(DictObsEnv(), max_episode_steps=12)


def make_cartpole() -> gym.Env[Any, Any]:
    """CartPole with a 40-step limit: a tilt-following policy both terminates and truncates."""
    return gym.make("CartPole-v1", max_episode_steps=40)


def make_pendulum() -> gym.Env[Any, Any]:
    return gym.make("Pendulum-v1", max_episode_steps=30)


class TiltPolicy(torch.nn.Module):
    """Deterministic CartPole policy: push towards the pole's tilt, with a weight to update."""

    def __init__(self, sign: float = 1.0) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([0.3, 0.0, sign, 0.0]))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs @ self.weight > 0).long()


class PendulumPolicy(torch.nn.Module):
    """Deterministic continuous policy for Pendulum: ``[N, 3] -> [N, 1]`` in [-2, 2]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(3, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return 2 * torch.tanh(self.net(obs))


def dict_policy(pos: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Deterministic policy for :class:`DictObsEnv` (for a TensorDictModule)."""
    return ((pos[..., 0] < 0) ^ (count % 3 == 0)).long()
