"""N Gymnasium envs in this process, stepped by our own loop straight into the batch buffers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rlcollect.data.buffers import BatchBuffers
from rlcollect.envs.base import EnvBatch

__all__ = ["GymEnvs"]


class GymEnvs(EnvBatch):
    """A list of ``gymnasium.Env`` stepped one after the other, without ``SyncVectorEnv``.

    Each step writes reward, flags and the next observation of every env into the buffers with
    one numpy item write each; nothing is concatenated or copied per step.

    Args:
        envs: the envs, all with the same spaces.
        max_episode_steps: truncate episodes after this many steps (on top of the envs' own
            time limits); ``None`` for no limit.

    Example:
        >>> import gymnasium as gym
        >>> envs = GymEnvs([gym.make("CartPole-v1") for _ in range(2)])
        >>> envs.num_envs, envs.observation_space.shape
        (2, (4,))
    """

    def __init__(self, envs: list[gym.Env[Any, Any]], max_episode_steps: int | None = None) -> None:
        if not envs:
            raise ValueError("envs must hold at least one env, got an empty list")
        super().__init__(len(envs), max_episode_steps)
        self._steps: list[int] = [0] * len(envs)  # a list: cheaper per env-step than numpy items
        self.envs = list(envs)
        self.observation_space = envs[0].observation_space
        self.action_space = envs[0].action_space
        for i, env in enumerate(envs[1:], start=1):
            if env.observation_space != self.observation_space or env.action_space != self.action_space:
                raise ValueError(
                    f"env {i} has spaces {env.observation_space}, {env.action_space}; "
                    f"env 0 has {self.observation_space}, {self.action_space}: all must match"
                )

    def bind(self, buffers: BatchBuffers) -> None:
        super().bind(buffers)
        # pick the write path once: a leaf observation is one numpy item write per env-step
        self._obs_array = None if buffers.dict_obs else next(iter(buffers.obs_ext_np.values()))
        self._reward = buffers.reward_np[..., 0]  # [N, T]
        self._terminated = buffers.terminated_np[..., 0]
        self._truncated = buffers.truncated_np[..., 0]
        self._actions = buffers.action_np  # [N, T, *act]
        self._actions_as_list = buffers.action_np.ndim == 2  # Discrete: python ints, like a hand loop

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        buffers = self._buffers
        assert buffers is not None, "bind() the buffers before reset()"
        for i, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seeds is None else seeds[i])
            buffers.write_obs(i, slot, obs)
        self._steps[:] = [0] * self.num_envs

    def step(self, t: int) -> None:
        buffers = self._buffers
        assert buffers is not None
        actions: Any = self._actions[:, t]
        if self._actions_as_list:
            actions = actions.tolist()
        obs_array, reward, limit, steps = self._obs_array, self._reward, self._limit, self._steps
        slot = t + 1
        for i, env in enumerate(self.envs):
            obs, r, terminated, truncated, _ = env.step(actions[i])
            reward[i, t] = r
            count = steps[i] + 1
            if terminated or truncated or count >= limit:
                self._terminated[i, t] = terminated
                self._truncated[i, t] = truncated or count >= limit
                buffers.finals.append((i, t, obs))
                obs, _ = env.reset()
                count = 0
            steps[i] = count
            if obs_array is not None:
                obs_array[i, slot] = obs
            else:
                buffers.write_obs(i, slot, obs)

    def seed_action_spaces(self, seeds: list[int]) -> None:
        for env, seed in zip(self.envs, seeds, strict=True):
            env.action_space.seed(seed)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _picklable_state(self) -> Any:
        return self.envs

    def _restore_picklable_state(self, state: Any) -> None:
        self.envs = list(state)
