"""A Gymnasium ``VectorEnv`` (sync, async or any other) as an env batch, one copy per step.

Same-step resets here: in ``SAME_STEP`` mode the final observation is read from
``info["final_obs"]``; in ``NEXT_STEP`` and ``DISABLED`` modes the finished envs are reset at once
with a partial reset (``options={"reset_mask": done}``), so no frame is spent on a reset and no
action is dropped. A ``NEXT_STEP`` env whose partial resets do not work (Gymnasium's own
``vector_entry_point`` envs) is stepped through its own resets instead
(:class:`~rlcollect.envs.next_step.NextStepVectorEnv`).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.checks import check_vector_step, checked_array
from rlcollect.data.layout import get_nested
from rlcollect.envs.base import EnvBatch
from rlcollect.envs.gym_envs import reset_observation
from rlcollect.envs.infos import vector_info_row, write_vector_infos

__all__ = ["GymVectorEnv", "PartialResetError", "autoreset_mode", "batch_rows", "few"]


def _viewed(value: Any) -> Any:
    """A CPU tensor's numpy view (no copy: a torch simulator's output read as arrays), anything
    else as it is (a CUDA tensor is refused by the write into the batch)."""
    if value.__class__ is torch.Tensor:
        try:
            return value.numpy()
        except (TypeError, RuntimeError):  # on another device, or a tensor that needs its grad
            return value
    return value


def batch_rows(values: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of a batched (possibly Dict) observation, copied: ``[len(rows), ...]`` arrays.
    Gymnasium's ``info["final_obs"]`` holds one entry per env (an object array), stacked here.

    Examples:
        >>> batch_rows(np.arange(6).reshape(3, 2), np.array([0, 2])).tolist()
        [[0, 1], [4, 5]]
        >>> per_env = np.array([None, np.ones(2), None], dtype=object)
        >>> batch_rows({"x": per_env}, np.array([1]))["x"].tolist()
        [[1.0, 1.0]]
    """
    if isinstance(values, dict):
        return {key: batch_rows(value, rows) for key, value in values.items()}
    array = np.asarray(values)
    if array.dtype == object:
        return _stacked([array[row] for row in rows.tolist()])
    return array[rows]  # (a fancy index: a copy)


def _stacked(entries: list[Any]) -> Any:
    """One array (or dict of arrays) from per-env observations (arrays or dicts of arrays)."""
    if entries and isinstance(entries[0], dict):
        return {key: _stacked([entry[key] for entry in entries]) for key in entries[0]}
    return np.stack([np.asarray(entry) for entry in entries])


class PartialResetError(ValueError):
    """A vector env without ``SAME_STEP`` autoreset whose partial resets do not work: ``mode`` is
    its autoreset mode (a ``NEXT_STEP`` one is stepped through its own resets instead)."""

    def __init__(self, message: str, mode: AutoresetMode) -> None:
        super().__init__(message)
        self.mode = mode


def autoreset_mode(env: VectorEnv[Any, Any, Any]) -> AutoresetMode:
    """The env's ``metadata["autoreset_mode"]`` (Gymnasium's default ``NEXT_STEP`` if unset)."""
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    try:
        return AutoresetMode(mode)
    except ValueError:
        raise ValueError(f"vector env {type(env).__name__} has metadata['autoreset_mode']={mode!r}, "
                         f"not one of {[m.value for m in AutoresetMode]}") from None


def _changed_rows(first: Any, second: Any) -> np.ndarray:
    """The rows (envs) where two batched (possibly Dict) observations differ."""
    if isinstance(first, dict):
        rows = [_changed_rows(first[key], second[key]) for key in first]
        return np.unique(np.concatenate(rows)) if rows else np.zeros(0, dtype=np.intp)
    a, b = np.asarray(first), np.asarray(second)
    same = (a == b) | ((a != a) & (b != b)) if a.dtype.kind in "fc" else a == b  # NaN equals NaN
    return np.flatnonzero(~same.reshape(len(a), -1).all(axis=1))


def few(indices: Any, shown: int = 5) -> str:
    """At most ``shown`` of ``indices`` and how many more: ``"[1, 2, 3, 4, 5] and 1018 more"``.

    Examples:
        >>> few(range(1, 1024)), few([3])
        ('[1, 2, 3, 4, 5] and 1018 more', '[3]')
    """
    listed = [int(i) for i in indices]
    more = f" and {len(listed) - shown} more" if len(listed) > shown else ""
    return f"{listed[:shown]}{more}"


def _probe_partial_reset(env: VectorEnv[Any, Any, Any], mode: AutoresetMode) -> None:
    """Raise :class:`PartialResetError` where the env's ``reset(options={"reset_mask": ...})``
    resets more than the masked envs (or fails).

    One reset, one step with sampled actions, one partial reset of sub-env 0: the others must keep
    their observations. The collector resets every env again before collecting.
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
        raise PartialResetError(
            f"vector env {name} has autoreset_mode {mode.value} and fails a partial reset "
            f"(reset(options={{'reset_mask': ...}}) raised {error!r}); rlcollect resets finished envs "
            f"that way when the env does not reset them itself: {instead}", mode) from error
    changed = _changed_rows(stepped, after)
    changed = changed[changed > 0]
    if len(changed):
        raise PartialResetError(
            f"vector env {name} has autoreset_mode {mode.value} but ignores reset_mask: a partial reset "
            f"of sub-env 0 also reset sub-envs {few(changed)}. rlcollect resets finished envs that way "
            f"when the env does not reset them itself (SAME_STEP or NEXT_STEP autoreset): {instead}", mode)


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
        mode = autoreset_mode(env)
        self._same_step = mode == AutoresetMode.SAME_STEP
        if not self._same_step:
            self._check_resets(mode)

    def _check_resets(self, mode: AutoresetMode) -> None:
        """Refuse (:class:`PartialResetError`) an env whose finished envs cannot be reset alone."""
        _probe_partial_reset(self.env, mode)

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
        obs, reward, terminated, truncated, info = self._stepped(t)
        limited = self._limit != sys.maxsize  # a collector-side episode limit: steps counted
        if limited:
            self._steps += 1
            truncated = truncated | (self._steps >= self._limit)
            self._truncated[:, t] = truncated
        done = terminated | truncated
        ended = done.any()
        # envs that already reset themselves (SAME_STEP) hold their final obs and info in the info
        # (read only at a step where an episode ended, or for the infos)
        self_reset = None
        if self._same_step and (ended or self._info_arrays):
            flags = info.get("_final_obs")
            self_reset = np.zeros_like(done) if flags is None else np.asarray(_viewed(flags))
        if self._info_arrays:  # info_keys: the step's values (a self-reset env's in final_info)
            write_vector_infos(self._info_arrays, t, info, self_reset, checking=self.check_writes)
        if ended:
            if not self._keep_all_finals(t, obs, done, self_reset, info):  # some are to reset here
                obs = self._reset_some(obs, done if self_reset is None else done & ~self_reset)
                if self.check_writes:
                    self._check(obs, reward, terminated, truncated, step=t)
            if limited:
                self._steps[done] = 0
        buffers.write_obs_all(t + 1, obs)

    def _keep_all_finals(self, t: int, obs: Any, done: np.ndarray, self_reset: np.ndarray | None,
                         info: dict[str, Any]) -> bool:
        """Keep the true final observations of the envs ``done`` marks (all at once: a
        simulator's as numpy views); return whether every one of them reset itself."""
        rows = np.flatnonzero(done)
        reset_itself = None if self_reset is None else self_reset[rows]
        if reset_itself is not None and reset_itself.all():  # a simulator's step: each reset itself
            self._keep_finals(rows, t, batch_rows(_viewed(info.get("final_obs")), rows))
            return True
        if reset_itself is None:
            reset_itself = np.zeros(len(rows), dtype=bool)
        for group, final in ((rows[reset_itself], info.get("final_obs")), (rows[~reset_itself], obs)):
            if len(group):
                self._keep_finals(group, t, batch_rows(_viewed(final), group))
        return False

    def _stepped(self, t: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env with ``action[:, t]``; check what it returned (a torch simulator's
        tensors read as numpy views) and write step ``t``'s reward and flags."""
        obs, reward, terminated, truncated, info = self.env.step(self._actions[:, t].copy())  # the envs' own
        obs, reward, terminated, truncated = (_viewed(obs), _viewed(reward), _viewed(terminated),
                                              _viewed(truncated))
        if self.check_writes:
            self._check(obs, reward, terminated, truncated, step=t)
        self._reward[:, t] = reward
        self._terminated[:, t] = terminated
        self._truncated[:, t] = truncated
        return obs, reward, terminated, truncated, info

    def _keep_finals(self, rows: np.ndarray, t: int, finals: Any) -> None:
        """Keep the final observations ``finals`` (``[len(rows), ...]``) of envs ``rows`` at step ``t``."""
        buffers = self._buffers
        assert buffers is not None
        if self.check_writes:
            for key, array in buffers.next_obs_np.items():
                name = "final observation" if not buffers.dict_obs else f"final observation {'.'.join(key)}"
                value = get_nested(finals, key) if buffers.dict_obs else finals
                checked_array(value, (len(rows), *array.shape[2:]), array.dtype, f"vector env's {name}",
                              env=int(rows[0]) if len(rows) == 1 else None, step=t)
        buffers.finals.append((rows, t, finals))

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
