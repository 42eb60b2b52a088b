"""N Gymnasium envs in this process, stepped by our own loop straight into the batch buffers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from numpy import ndarray

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.checks import (
    FLAG_TYPES,
    check_observation,
    checked_array,
    checked_flag,
    checked_reward,
)
from rlcollect.envs.base import EnvBatch, own_copy
from rlcollect.envs.infos import write_info

__all__ = ["GymEnvs"]

#: Reward types an env may return and rewrite later (its own buffer): copied when returned.
REWRITABLE: tuple[type, ...] = (ndarray, torch.Tensor)


def old_api_error(env: Any, call: str, expected: str, result: Any) -> ValueError:
    """The error for an env whose ``reset()`` or ``step()`` does not return what Gymnasium's do.

    Examples:
        >>> print(old_api_error("env", "reset()", "(obs, info)", (1.0, None)))  # doctest: +ELLIPSIS
        env 'env' returned a tuple of 2 values (float, NoneType) from reset(), not (obs, info) ...
    """
    got = (f"a tuple of {len(result)} values ({', '.join(type(v).__name__ for v in result[:6])})"
           if isinstance(result, tuple) else type(result).__name__)
    return ValueError(
        f"env {env!r:.120} returned {got} from {call}, not {expected} (info a dict): rlcollect needs "
        "the Gymnasium API. Port the env, or wrap an old gym env with shimmy (pip install shimmy; "
        "gymnasium.make('GymV21Environment-v0', env=...))"
    )


def reset_observation(env: Any, result: Any, call: str = "reset()", index: int | None = None,
                      step: int | None = None) -> Any:
    """The observation of ``result``, what ``env.reset()`` returned, checked as Gymnasium's
    ``(obs, info)`` at every reset (env ``index``'s, after ``step``, named in the message)."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
        return result[0]
    raise old_api_error(env, call if index is None else f"{call} (env {index}, after step {step})",
                        "(obs, info)", result)


class GymEnvs(EnvBatch):
    """A list of ``gymnasium.Env`` stepped one after the other, without ``SyncVectorEnv``.

    Each step writes the next observation of every env into the buffers with one numpy item
    write, and the flags only when an episode ends; the rewards go to a list and into the
    buffer once per batch (:meth:`finish`). Nothing is concatenated or copied per step.

    Args:
        envs: the envs, all with the same spaces.
        max_episode_steps: truncate episodes after this many steps (on top of the envs' own
            time limits); ``None`` for no limit.
        given: the one env is the user's own instance (not copies made from a source): it is
            the collector's ``env`` and brings its one env whatever ``num_envs_per_worker``.

    Examples:
        >>> import gymnasium as gym
        >>> envs = GymEnvs([gym.make("CartPole-v1") for _ in range(2)])
        >>> envs.num_envs, envs.observation_space.shape
        (2, (4,))
    """

    follows_num_envs = True  # num_envs copies of one env
    steps_rows = True

    def __init__(self, envs: list[gym.Env[Any, Any]], max_episode_steps: int | None = None, *,
                 given: bool = False) -> None:
        if not envs:
            raise ValueError("envs must hold at least one env, got an empty list")
        super().__init__(len(envs), max_episode_steps)
        self.given = envs[0] if given else None
        if given:
            self.follows_num_envs = False
        self._steps: list[int] = [0] * len(envs)  # a list: cheaper per env-step than numpy items
        self._reward_rows: list[list[Any]] = []
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
        self._reward = buffers.reward_np[..., 0]  # [N, T]
        self._terminated = buffers.terminated_np[..., 0]
        self._truncated = buffers.truncated_np[..., 0]
        array = next(iter(buffers.obs_ext_np.values()))  # the leaf observation's shape and dtype
        self._obs_dtype = array.dtype
        # what the env returns passes the identity test; the buffer may store it in another dtype
        # (obs_dtype): numpy casts it in the write, checked_array says which values may be cast
        space_dtype = getattr(self.observation_space, "dtype", None)
        env_dtype = np.dtype(space_dtype) if space_dtype is not None else array.dtype
        # what each step reads, made once: the actions step-major (a third of the cost of [:, t];
        # Discrete's as python ints, like a hand loop), the write path (a leaf observation: one
        # numpy item write per env-step), the constants
        self._action_rows = buffers.action_np.swapaxes(0, 1)  # [T, N, *act]
        self._fixed = (None if buffers.dict_obs else array, self._limit, self._steps, array.shape[2:],
                       env_dtype, self._info_arrays, buffers.action_np.ndim == 2)
        if len(self._reward_rows) != buffers.num_steps:
            # rewards go to a list per step, then into the buffer once per batch (finish): a list
            # store costs a quarter of a numpy item write, and numpy's conversion checks the types
            self._reward_rows = [[0.0] * self.num_envs for _ in range(buffers.num_steps)]

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        buffers = self._buffers
        assert buffers is not None, "bind() the buffers before reset()"
        for i, env in enumerate(self.envs):
            obs = reset_observation(env, env.reset(seed=None if seeds is None else seeds[i]))
            if self.check_writes:
                check_observation(obs, buffers.obs_ext_np, buffers.dict_obs, env=i, step=slot)
            buffers.write_obs(i, slot, obs)
        self._steps[:] = [0] * self.num_envs

    def step_rows(self, t: int, start: int = 0, stop: int | None = None) -> None:
        buffers = self._buffers
        assert buffers is not None
        # each step's actions are the envs' own (a copy, or python ints), as in a hand-written loop:
        # an env that keeps its action, or edits it in place, touches no batch
        obs_array, limit, steps, shape, dtype, infos, as_list = self._fixed
        actions: Any = self._action_rows[t]
        envs = self.envs
        if stop is not None and stop - start != self.num_envs:  # this group's rows only
            actions, envs = actions[start:stop], envs[start:stop]
        actions = actions.tolist() if as_list else actions.copy()
        rewards, slot = self._reward_rows[t], t + 1
        # the checks (rlcollect.data.checks) cost two identity tests per env-step: flags are
        # looked at only when they are not exactly False, rewards when the batch is finished
        checking, flag_types, array_type, rewritable = self.check_writes, FLAG_TYPES, ndarray, REWRITABLE
        for i, (env, action) in enumerate(zip(envs, actions, strict=True), start):
            result = env.step(action)
            try:
                obs, r, terminated, truncated, info = result
            except (TypeError, ValueError):
                raise old_api_error(env, "step()", "(obs, reward, terminated, truncated, info)",
                                    result) from None
            if r.__class__ in rewritable:  # read at the batch's end: a copy, the env may rewrite it
                r = own_copy(r)
            rewards[i] = r
            if infos:  # info_keys: the step's values, before any reset
                write_info(infos, i, t, info, checking=checking)
            count = steps[i] + 1
            if terminated is not False or truncated is not False or count >= limit:
                if checking and (terminated.__class__ not in flag_types
                                 or truncated.__class__ not in flag_types):
                    terminated = checked_flag(terminated, "terminated", env=i, step=t)
                    truncated = checked_flag(truncated, "truncated", env=i, step=t)
                if terminated or truncated or count >= limit:
                    self._terminated[i, t] = terminated
                    self._truncated[i, t] = truncated or count >= limit
                    if checking and (obs.__class__ is not array_type or obs.dtype is not dtype
                                     or obs.shape != shape):
                        check_observation(obs, buffers.next_obs_np, buffers.dict_obs, env=i, step=t)
                    buffers.finals.append((i, t, own_copy(obs)))  # the reset may rewrite obs
                    obs = reset_observation(env, env.reset(), index=i, step=t)
                    count = 0
            steps[i] = count
            if obs_array is not None:
                if checking and (obs.__class__ is not array_type or obs.dtype is not dtype
                                 or obs.shape != shape):
                    obs = checked_array(obs, shape, self._obs_dtype, "observation", env=i, step=t)
                obs_array[i, slot] = obs
            else:
                if checking:
                    check_observation(obs, buffers.obs_ext_np, True, env=i, step=t)
                buffers.write_obs(i, slot, obs)

    step = step_rows  # every row: one call a step, not two (a subclass overriding step_rows sets it again)

    def finish(self, steps: int) -> None:
        if not steps:
            return
        rows = self._reward_rows[:steps]
        try:
            values = np.array(rows)  # [steps, N]; Python floats: float64, one C loop
        except (TypeError, ValueError):  # ragged: arrays among the numbers
            values = None
        if values is None or values.dtype.kind not in "biuf" or values.ndim != 2:
            # one value at a time, at every check level (there is nothing cheaper to skip): each
            # a real number or a one-element array, else an error naming the env and the step
            values = np.array([[checked_reward(r, env=i, step=t) for i, r in enumerate(row)]
                               for t, row in enumerate(rows)])
        with np.errstate(over="ignore"):  # a float64 beyond float32's range: the batch checks name it
            self._reward[:, :steps] = values.T

    def step_info(self) -> dict[str, Any]:
        env = self.envs[0]
        env.reset()
        return dict(env.step(env.action_space.sample())[4])

    def seed_action_spaces(self, seeds: list[int]) -> None:
        for env, seed in zip(self.envs, seeds, strict=True):
            env.action_space.seed(seed)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _state_objects(self) -> Any:
        return self.envs
