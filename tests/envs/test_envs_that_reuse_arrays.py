"""Envs that return an array they later rewrite in place (their state, which ``reset`` zeroes), as
dm_control's and many hand-written envs do: the batch holds what each call returned, when it
returned it; above all the true final observation, never the reset that rewrote it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv

from rlcollect import AsyncBatchedCollector, Collector, MultiSyncCollector

pytestmark = pytest.mark.timeout(120)

LENGTH = 3  # steps per episode


class InPlaceState(gym.Env[Any, int]):
    """Observation ``[step in the episode, episode]``: the same array, rewritten by every call."""

    observation_space = spaces.Box(-100, 100, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, as_dict: bool = False) -> None:
        self.state = np.zeros(2, np.float32)
        self.as_dict = as_dict
        if as_dict:
            self.observation_space = spaces.Dict({"state": InPlaceState.observation_space})  # type: ignore[assignment]

    def _obs(self) -> Any:
        return {"state": self.state} if self.as_dict else self.state

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.state[0] = 0
        self.state[1] += 1
        return self._obs(), {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict]:
        self.state[0] += 1
        return self._obs(), 1.0, bool(self.state[0] >= LENGTH), False, {}


def in_place_dict() -> InPlaceState:
    return InPlaceState(as_dict=True)


def in_place_vector() -> SyncVectorEnv:
    return SyncVectorEnv([InPlaceState, InPlaceState], copy=False)  # NEXT_STEP, Gymnasium's default


class Zero(torch.nn.Module):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], dtype=torch.int64)


def check_steps(batch: Any, key: str) -> None:
    """Step ``t`` of every row: observation ``t % LENGTH``, next observation one more (``LENGTH``
    at an episode's end: the final observation, not the reset's 0)."""
    obs, nxt = batch[key][..., 0], batch["next", key][..., 0]
    steps = torch.arange(obs.shape[1], dtype=obs.dtype) % LENGTH
    assert torch.equal(obs, steps.expand_as(obs)), obs
    assert torch.equal(nxt, (steps + 1).expand_as(nxt)), nxt
    assert torch.equal(batch["next", "done"][..., 0], nxt == LENGTH)


@pytest.mark.parametrize("kind", ["single", "sync", "batched", "dict", "vector"])
def test_the_true_final_observation_of_an_env_that_rewrites_its_array(kind: str) -> None:
    frames = {"frames_per_batch": 24, "total_frames": 24, "seed": 0}
    if kind == "single":
        collector: Any = Collector(InPlaceState, Zero(), num_envs=2, **frames)
    elif kind == "sync":
        collector = MultiSyncCollector(InPlaceState, Zero(), num_workers=2, **frames)
    elif kind == "batched":
        collector = AsyncBatchedCollector(InPlaceState, Zero(), num_envs=2, envs_per_worker=1,
                                          frames_per_batch=12, total_frames=12, seed=0)
    elif kind == "dict":
        policy = lambda td: td.set("action", torch.zeros(td.shape[0], dtype=torch.int64))  # noqa: E731
        collector = Collector(in_place_dict, policy, num_envs=2, **frames)
    else:
        collector = Collector(in_place_vector, Zero(), **frames)
    with collector:
        batch = next(iter(collector))
    check_steps(batch, "state" if kind == "dict" else "observation")


class InPlaceReward(gym.Env[Any, int]):
    """Reward ``t`` at step ``t``, returned as the same 0-d array (or tensor), rewritten each step."""

    observation_space = spaces.Box(-100, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, as_tensor: bool = False) -> None:
        self.reward: Any = torch.zeros(()) if as_tensor else np.zeros(())
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[Any, Any, bool, bool, dict]:
        self.t += 1
        self.reward.fill(self.t) if isinstance(self.reward, np.ndarray) else self.reward.fill_(self.t)
        return np.full(1, self.t, np.float32), self.reward, False, False, {}


@pytest.mark.parametrize("as_tensor", [False, True])
def test_each_step_keeps_its_reward_when_the_env_rewrites_it(as_tensor: bool) -> None:
    with Collector(lambda: InPlaceReward(as_tensor), Zero(), frames_per_batch=6, total_frames=6) as collector:
        batch = next(iter(collector))
    assert batch["next", "reward"][0, :, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
