"""A Gymnasium ``VectorEnv`` (sync, async or any other) as an env batch, one copy per step.

Every autoreset mode gives same-step resets here: in ``SAME_STEP`` mode the final observation is
read from ``info["final_obs"]``; in ``NEXT_STEP`` and ``DISABLED`` modes the finished envs are reset
at once with a partial reset (``options={"reset_mask": done}``), so no frame is spent on a reset
and no action is dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from rlcollect.data.buffers import BatchBuffers
from rlcollect.envs.base import EnvBatch

__all__ = ["GymVectorEnv"]


def _env_slice(obs: Any, i: int) -> Any:
    """Env ``i``'s observation out of a batched (possibly Dict) observation."""
    if isinstance(obs, dict):
        return {key: _env_slice(value, i) for key, value in obs.items()}
    return np.array(obs[i])  # a copy: the vector env may reuse its arrays


class GymVectorEnv(EnvBatch):
    """Wraps a ``gymnasium.vector.VectorEnv``; its arrays are written into the buffers per step.

    Args:
        env: the vector env.
        max_episode_steps: truncate episodes after this many steps; ``None`` for no limit.

    Example:
        >>> import gymnasium as gym
        >>> venv = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
        >>> GymVectorEnv(venv).num_envs
        3
    """

    def __init__(self, env: VectorEnv[Any, Any, Any], max_episode_steps: int | None = None) -> None:
        super().__init__(env.num_envs, max_episode_steps)
        self.env = env
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._same_step = AutoresetMode(mode) == AutoresetMode.SAME_STEP

    def bind(self, buffers: BatchBuffers) -> None:
        super().bind(buffers)
        self._reward = buffers.reward_np[..., 0]  # [N, T]
        self._terminated = buffers.terminated_np[..., 0]
        self._truncated = buffers.truncated_np[..., 0]
        self._actions = buffers.action_np

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        assert self._buffers is not None, "bind() the buffers before reset()"
        # a vector env seeded with s seeds sub-env i with s + i, Gymnasium's own convention
        obs, _ = self.env.reset(seed=None if seeds is None else seeds[0])
        self._buffers.write_obs_all(slot, obs)
        self._steps[:] = 0

    def step(self, t: int) -> None:
        buffers = self._buffers
        assert buffers is not None
        obs, reward, terminated, truncated, info = self.env.step(self._actions[:, t])
        self._steps += 1
        truncated = truncated | (self._steps >= self._limit)
        self._reward[:, t] = reward
        self._terminated[:, t] = terminated
        self._truncated[:, t] = truncated
        done = terminated | truncated
        if done.any():
            # envs that already reset themselves (SAME_STEP) hold their final obs in the info
            self_reset = info.get("_final_obs", np.zeros_like(done)) if self._same_step else ~done
            for i in np.flatnonzero(done).tolist():
                final = info["final_obs"][i] if self_reset[i] else _env_slice(obs, i)
                buffers.finals.append((i, t, final))
            to_reset = done & ~self_reset
            if to_reset.any():
                obs, _ = self.env.reset(options={"reset_mask": to_reset})
            self._steps[done] = 0
        buffers.write_obs_all(t + 1, obs)

    def seed_action_spaces(self, seeds: list[int]) -> None:
        self.env.action_space.seed(seeds[0])

    def close(self) -> None:
        self.env.close()

    def _picklable_state(self) -> Any:
        return self.env

    def _restore_picklable_state(self, state: Any) -> None:
        self.env = state
