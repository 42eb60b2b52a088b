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
from rlcollect.data.checks import check_observation, check_vector_step
from rlcollect.envs.base import EnvBatch, own_copy
from rlcollect.envs.gym_envs import reset_observation
from rlcollect.envs.infos import vector_info_row, write_vector_infos

__all__ = ["GymVectorEnv"]


def _same_obs(first: Any, second: Any, i: int) -> bool:
    if isinstance(first, dict):
        return all(_same_obs(first[key], second[key], i) for key in first)
    return bool(np.array_equal(np.asarray(first)[i], np.asarray(second)[i], equal_nan=True))


def _probe_partial_reset(env: VectorEnv[Any, Any, Any], mode: AutoresetMode) -> None:
    """Refuse a vector env whose ``reset(options={"reset_mask": ...})`` resets more than the masked
    envs (or fails): without ``SAME_STEP`` autoreset, the collector resets finished envs that way.

    One reset, one step with sampled actions, one partial reset of sub-env 0: the others must keep
    their observations. The collector resets every env again
    before collecting.
    """
    name = type(env.unwrapped).__name__
    instead = (
        "pass gym.make_vec(env_id, num_envs=N, vectorization_mode='sync' or 'async'), whose "
        "reset_mask works, or the env id (or a factory) with num_envs=N"
    )
    env.reset()
    stepped, *_ = env.step(env.action_space.sample())
    mask = np.zeros(env.num_envs, dtype=bool)
    mask[0] = True
    try:
        after, _ = env.reset(options={"reset_mask": mask})
    except Exception as error:
        raise ValueError(
            f"vector env {name} has autoreset_mode {mode.value} and fails a partial reset "
            f"(reset(options={{'reset_mask': ...}}) raised {error!r}); rlcollect resets finished envs "
            f"that way when the env does not reset them in the same step: {instead}"
        ) from error
    changed = [i for i in range(1, env.num_envs) if not _same_obs(stepped, after, i)]
    if changed:
        raise ValueError(
            f"vector env {name} has autoreset_mode {mode.value} but ignores reset_mask: a partial reset "
            f"of sub-env 0 also reset sub-envs {changed}. rlcollect needs SAME_STEP autoreset or "
            f"partial resets that honour the mask: {instead}"
        )


class GymVectorEnv(EnvBatch):
    """Wraps a ``gymnasium.vector.VectorEnv``; its arrays are written into the buffers per step.

    Args:
        env: the vector env.
        max_episode_steps: truncate episodes after this many steps; ``None`` for no limit.

    Examples:
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
        try:
            self._same_step = AutoresetMode(mode) == AutoresetMode.SAME_STEP
        except ValueError:
            raise ValueError(f"vector env {type(env).__name__} has metadata['autoreset_mode']={mode!r}, "
                             f"not one of {[m.value for m in AutoresetMode]}") from None
        if not self._same_step:
            _probe_partial_reset(env, AutoresetMode(mode))

    def bind(self, buffers: BatchBuffers) -> None:
        super().bind(buffers)
        self._reward = buffers.reward_np[..., 0]  # [N, T]
        self._terminated = buffers.terminated_np[..., 0]
        self._truncated = buffers.truncated_np[..., 0]
        self._actions = buffers.action_np

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        assert self._buffers is not None, "bind() the buffers before reset()"
        obs = self._reset_all(seeds)
        if self.check_writes:
            zeros = np.zeros(self.num_envs)
            self._check(obs, zeros, zeros == 1, zeros == 1, step=slot)
        self._buffers.write_obs_all(slot, obs)
        self._steps[:] = 0

    def step(self, t: int) -> None:
        buffers = self._buffers
        assert buffers is not None
        obs, reward, terminated, truncated, info = self.env.step(self._actions[:, t].copy())  # the envs' own
        if self.check_writes:
            self._check(obs, reward, terminated, truncated, step=t)
        self._steps += 1
        truncated = truncated | (self._steps >= self._limit)
        self._reward[:, t] = reward
        self._terminated[:, t] = terminated
        self._truncated[:, t] = truncated
        done = terminated | truncated
        ended = done.any()
        # envs that already reset themselves (SAME_STEP) hold their final obs and info in the info
        # (read only at a step where an episode ended, or for the infos)
        self_reset = (np.asarray(info.get("_final_obs", np.zeros_like(done)))
                      if self._same_step and (ended or self._info_arrays) else None)
        if self._info_arrays:  # info_keys: the step's values (a self-reset env's in final_info)
            write_vector_infos(self._info_arrays, t, info, self_reset, checking=self.check_writes)
        if ended:
            for i in np.flatnonzero(done).tolist():
                reset_itself = self_reset is not None and self_reset[i]
                final = own_copy(info["final_obs"][i]) if reset_itself else own_copy(obs, row=i)
                if self.check_writes:
                    check_observation(final, buffers.next_obs_np, buffers.dict_obs, env=i, step=t)
                buffers.finals.append((i, t, final))
            to_reset = done if self_reset is None else done & ~self_reset
            if to_reset.any():
                obs = self._reset_some(obs, to_reset)
                if self.check_writes:
                    self._check(obs, reward, terminated, truncated, step=t)
            self._steps[done] = 0
        buffers.write_obs_all(t + 1, obs)

    def step_info(self) -> dict[str, Any]:
        self.env.reset()
        actions = np.stack([self.action_space.sample() for _ in range(self.num_envs)])
        info = self.env.step(actions)[4]
        rows = {}
        for source in (info, info.get("final_info") or {}):  # sub-env 0's, its final step's if it ended
            for key in source:
                there, value = vector_info_row(source, key, 0)
                if there and not str(key).startswith("_"):
                    rows[str(key)] = value
        return rows

    def _reset_all(self, seeds: list[int] | None) -> Any:
        """Reset every env (seeded from ``seeds[0]``); return their observations."""
        # a vector env seeded with s seeds sub-env i with s + i, Gymnasium's own convention
        return reset_observation(self.env, self.env.reset(seed=None if seeds is None else seeds[0]))

    def _reset_some(self, obs: Any, to_reset: np.ndarray) -> Any:
        """Reset the envs ``to_reset`` marks (a bool mask); return every env's observation."""
        return reset_observation(self.env, self.env.reset(options={"reset_mask": to_reset}),
                                 "reset(options={'reset_mask': ...})")

    def _check(self, obs: Any, reward: Any, terminated: Any, truncated: Any, *, step: int) -> None:
        assert self._buffers is not None
        buffers = self._buffers
        check_vector_step(obs, reward, terminated, truncated, buffers.obs_ext_np, buffers.dict_obs, step=step)

    def seed_action_spaces(self, seeds: list[int]) -> None:
        self.env.action_space.seed(seeds[0])

    def close(self) -> None:
        self.env.close()

    def _state_objects(self) -> Any:
        return self.env
