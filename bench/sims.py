"""A batched simulator written in torch, for the benchmarks and the tests of batched simulators.

:class:`TorchCartPoleVectorEnv` is CartPole's physics (Gymnasium's constants and Euler step) on
``num_envs`` envs at once in torch tensors, as GPU simulators hand their batches out: a Gymnasium
``VectorEnv`` in ``SAME_STEP`` autoreset mode whose ``step`` returns torch tensors, with the final
observations of the envs that reset in ``info["final_obs"]`` (marked by ``info["_final_obs"]``).

Examples:
    >>> env = TorchCartPoleVectorEnv(3)
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, obs.dtype
    (torch.Size([3, 4]), torch.float32)
    >>> obs, reward, terminated, truncated, info = env.step(torch.ones(3, dtype=torch.int64))
    >>> reward.tolist(), bool(terminated.any())
    ([1.0, 1.0, 1.0], False)
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

__all__ = ["TorchCartPoleVectorEnv", "cartpole_step"]

GRAVITY, CART, POLE, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * math.pi / 360


def cartpole_step(state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """CartPole's next state (``[N, 4]``) from ``state`` and ``action`` (``[N]``, 0 or 1)."""
    x, x_dot, theta, theta_dot = state.unbind(-1)
    force = torch.where(action == 1, FORCE, -FORCE).to(state.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    total, pole_ml = CART + POLE, POLE * HALF_LENGTH
    temp = (force + pole_ml * theta_dot.square() * sin) / total
    theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE * cos.square() / total))
    x_acc = temp - pole_ml * theta_acc * cos / total
    return torch.stack((x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot,
                        theta_dot + TAU * theta_acc), -1)


class TorchCartPoleVectorEnv(VectorEnv[Any, Any, Any]):
    """``num_envs`` CartPoles stepped together in torch (see the module docstring).

    Args:
        num_envs: envs stepped per call.
        max_episode_steps: episodes are truncated after this many steps.
        device: where the state lives and the tensors are returned.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, max_episode_steps: int = 500,
                 device: str | torch.device = "cpu") -> None:
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.device = torch.device(device)
        high = np.array([X_LIMIT * 2, np.inf, THETA_LIMIT * 2, np.inf], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._generator = torch.Generator(self.device)
        self.state = torch.zeros(num_envs, 4, device=self.device)
        self.steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _fresh(self, count: int) -> torch.Tensor:
        return torch.rand(count, 4, generator=self._generator, device=self.device) * 0.1 - 0.05

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[torch.Tensor, dict[str, Any]]:
        if seed is not None:
            self._generator.manual_seed(seed if isinstance(seed, int) else seed[0])
        self.state = self._fresh(self.num_envs)
        self.steps.zero_()
        return self.state.clone(), {}

    def step(self, actions: Any) -> tuple[torch.Tensor, ...] | Any:
        action = torch.as_tensor(actions, device=self.device)
        self.state = cartpole_step(self.state, action)
        self.steps += 1
        x, theta = self.state[:, 0], self.state[:, 2]
        terminated = (x.abs() > X_LIMIT) | (theta.abs() > THETA_LIMIT)
        truncated = (self.steps >= self.max_episode_steps) & ~terminated
        reward = torch.ones(self.num_envs, device=self.device)
        done = terminated | truncated
        info: dict[str, Any] = {}
        if bool(done.any()):
            info = {"final_obs": self.state.clone(), "_final_obs": done}
            self.state[done] = self._fresh(int(done.sum()))
            self.steps[done] = 0
        return self.state.clone(), reward, terminated, truncated, info
