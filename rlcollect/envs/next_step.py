"""A ``NEXT_STEP`` vector env that cannot reset some of its envs, stepped through its own resets.

Gymnasium's default vector envs (``gym.make_vec(env_id, num_envs=N)`` for an env with a
``vector_entry_point``, such as ``CartPoleVectorEnv``) reset a finished sub-env at the next
``step``: that step ignores the sub-env's action and answers with its reset observation, reward 0
and no end. Their ``reset()`` resets every sub-env, so the collector cannot reset one at once.

Such a step is not a transition. The batch keeps its ``[N, T]`` layout — row ``i`` is sub-env
``i``, column ``t`` the vector env's step ``t`` — and marks the frame ``False`` in
``("collector", "mask")``, as it marks the frames a preempted worker did not collect: its
trajectory id is ``-1``, its flags are cleared, no episode counts it, the frame counters and
``stats()`` leave it out, and the replay buffers, ``split_trajectories``, ``trajs_per_batch`` and
``rlcollect export`` drop it (a run folder keeps the batch as it came, mask included). The
frame before it is the episode's last, with the true final observation as its next observation;
the frame after it starts the next episode (``is_init`` where the batch holds it). A learner
reading the batch as a tensor weighs its loss with the mask.

Examples:
    >>> import gymnasium as gym
    >>> from rlcollect import Collector
    >>> make = lambda: gym.make_vec("CartPole-v1", num_envs=4)  # NEXT_STEP, resets all at once
    >>> with Collector(make, frames_per_batch=400, total_frames=400, seed=0) as collector:
    ...     batch = next(iter(collector))
    >>> mask = batch["collector", "mask"]
    >>> bool((~mask).any()), int(mask.sum()) == collector.stats().frames
    (True, True)
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from rlcollect.data.buffers import BatchBuffers
from rlcollect.envs.infos import write_vector_infos
from rlcollect.envs.vector import GymVectorEnv

__all__ = ["NextStepVectorEnv"]


class NextStepVectorEnv(GymVectorEnv):
    """Steps a ``NEXT_STEP`` vector env through its own resets; see the module docstring.

    Args:
        env: the vector env (``metadata["autoreset_mode"]`` ``NEXT_STEP``).
        max_episode_steps: must be ``None``: the collector cannot end one sub-env's episode (give
            the limit to the env: ``gym.make_vec(env_id, num_envs=N, max_episode_steps=K)``).
    """

    takes_own_resets = True

    def __init__(self, env: VectorEnv[Any, Any, Any], max_episode_steps: int | None = None) -> None:
        self._resetting = np.zeros(env.num_envs, dtype=bool)  # sub-envs whose next step is a reset
        self._any_resetting = False
        super().__init__(env, max_episode_steps)

    def _check_resets(self, mode: AutoresetMode) -> None:
        if self._limit != sys.maxsize:
            raise ValueError(
                f"max_frames_per_traj={self._limit} with vector env {type(self.env.unwrapped).__name__} "
                "(NEXT_STEP autoreset, whose reset() resets every sub-env): the collector cannot end one "
                "sub-env's episode; give the limit to the env instead, e.g. gym.make_vec(env_id, "
                f"num_envs=N, max_episode_steps={self._limit})")

    def bind(self, buffers: BatchBuffers) -> None:
        super().bind(buffers)
        assert buffers.mask_np is not None, "NextStepVectorEnv's batches are laid out masked"
        self._mask = buffers.mask_np  # [N, T]

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        super().reset(slot, seeds)
        self._resetting[:] = False
        self._any_resetting = False

    def step(self, t: int) -> None:
        buffers = self._buffers
        assert buffers is not None
        obs, _, terminated, truncated, info = self._stepped(t)
        done = np.logical_or(terminated, truncated)
        if self._any_resetting:  # this step reset those envs: not a transition (its values are
            self._mask[:, t] = ~self._resetting  # cleared once per batch, by finish_batch)
            done &= ~self._resetting
        if self._info_arrays:
            write_vector_infos(self._info_arrays, t, info, None, checking=self.check_writes)
        self._resetting = done  # their final observation is this step's
        self._any_resetting = bool(done.any())
        buffers.write_obs_all(t + 1, obs)

    def state_dict(self) -> dict[str, Any]:
        """As :meth:`EnvBatch.state_dict`, with the sub-envs whose next step is their reset."""
        return {**super().state_dict(), "resetting": torch.from_numpy(self._resetting.copy())}

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        resetting = np.asarray(state.get("resetting", self._resetting), dtype=bool)
        if resetting.shape != self._resetting.shape:
            raise ValueError(f"load_state_dict: the state's 'resetting' has shape {list(resetting.shape)}, "
                             f"where these envs need {[self.num_envs]}")
        loaded = super().load_state_dict(state)
        if loaded:
            self._resetting = resetting.copy()
            self._any_resetting = bool(resetting.any())
        return loaded
