"""Run inside a private mount namespace whose ``/dev/shm`` is a 64 MB tmpfs (Docker's default), by
``test_small_shm.py``: each case prints one line ``case|ok|...`` or ``case|error type|message|left``
where ``left`` is what ``/dev/shm`` holds after the case (it must hold nothing of rlcollect's)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict

from rlcollect import AsyncBatchedCollector, MultiSyncCollector, ReplayBuffer


class BigObs(gym.Env[Any, Any]):
    """Observations of 100 KB (uint8), episodes of 50 steps."""

    observation_space = spaces.Box(0, 255, (100, 1000), np.uint8)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((100, 1000), np.uint8), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return np.full((100, 1000), self.t % 255, np.uint8), 1.0, self.t >= 50, False, {}


def cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


class Wide(torch.nn.Module):
    """A 100 MB policy for CartPole (a 5000 x 5000 float32 layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(5000, 5000)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], dtype=torch.int64)


def big_batches() -> None:
    with MultiSyncCollector([BigObs, BigObs], None, frames_per_batch=1024, total_frames=2048) as c:
        c.next()


def shared_buffer() -> None:
    buffer = ReplayBuffer(200_000, storage="shared")
    buffer.extend(TensorDict({"x": torch.zeros(4, 250)}, [4]))  # 200,000 x 1,000 bytes


def big_policy() -> None:
    with MultiSyncCollector([cartpole, cartpole], Wide(), frames_per_batch=64, total_frames=128) as c:
        c.next()


def batched_big_observations() -> None:
    with AsyncBatchedCollector(BigObs, lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64),
                               num_envs=2, frames_per_batch=1024, total_frames=2048) as c:
        c.next()


def nearly_full() -> None:
    with open("/dev/shm/filler", "wb") as filler:  # 60 of the 64 MB taken by someone else
        filler.write(b"\0" * 60 * 2**20)
    try:
        with MultiSyncCollector([BigObs, BigObs], None, frames_per_batch=64, total_frames=128) as c:
            c.next()
    finally:
        os.unlink("/dev/shm/filler")


def fits() -> None:
    with MultiSyncCollector([cartpole, cartpole], None, frames_per_batch=64, total_frames=128) as c:
        assert c.next()["observation"].shape == (2, 32, 4)


CASES: dict[str, Callable[[], None]] = {
    "big_batches": big_batches, "shared_buffer": shared_buffer, "big_policy": big_policy,
    "batched_big_observations": batched_big_observations, "nearly_full": nearly_full, "fits": fits,
}

if __name__ == "__main__":
    torch.set_num_threads(1)
    for name in sys.argv[1:]:
        try:
            CASES[name]()
            outcome = "ok|"
        except Exception as error:  # reported to the test, which checks type and message
            outcome = f"{type(error).__name__}|{' '.join(str(error).split())}"
        print(f"{name}|{outcome}|{','.join(sorted(os.listdir('/dev/shm')))}", flush=True)
