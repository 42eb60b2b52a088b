"""An env gets an action of its own at each step, as in a hand-written loop: one it keeps (a
recorder of its episode) still holds what the policy chose after later steps and batches, and one
it edits in place changes nothing that is stored. In every collector, for Gymnasium envs, a
Gymnasium vector env and a TorchRL env.

:class:`KeepsActions` edits each action it gets in place (after reading it), then keeps it; at every
step it counts the kept actions that no longer hold what they held when kept, and returns that
count in its observation. The batch's actions must be the policy's, its counts all zero.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector

pytestmark = pytest.mark.timeout(120)


class KeepsActions(gym.Env[np.ndarray, np.ndarray]):
    """Observation ``[step, changed kept actions, 1]``; 2-d Box actions; 6-step episodes."""

    observation_space = gym.spaces.Box(-100.0, 100.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self) -> None:
        self.kept: list[tuple[np.ndarray, np.ndarray]] = []
        self.t = 0

    def _obs(self) -> np.ndarray:
        changed = sum(not np.array_equal(action, value) for action, value in self.kept)
        return np.array([self.t, changed, 1.0], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action[...] = -0.5  # an env that clips or rescales in place
        self.kept.append((action, action.copy()))
        self.t += 1
        return self._obs(), 1.0, self.t >= 6, False, {}


class StepPolicy(nn.Module):
    """Actions from the step counter: distinct at every step, in the action space."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.stack([obs[..., 0] / 10.0, -obs[..., 0] / 20.0], -1)


def vector_env() -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([KeepsActions, KeepsActions],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def torchrl_env() -> Any:
    from torchrl.envs import GymWrapper

    return GymWrapper(KeepsActions())


def build(kind: str, source: Any) -> Any:
    common: dict[str, Any] = {"frames_per_batch": 16, "total_frames": 64, "seed": 0}
    if kind == "single":
        return Collector(source, StepPolicy(), num_envs=2 if source is KeepsActions else 1, **common)
    if kind == "batched":
        return AsyncBatchedCollector([source, source], StepPolicy(), **common)
    workers = {"sync": MultiSyncCollector, "async": MultiAsyncCollector}
    return workers[kind](source, StepPolicy(), num_workers=2, **common)


def check(batches: list[Any]) -> None:
    assert len(batches) >= 3  # the buffers are reused: actions kept from the first batch are overwritten
    for batch in batches:
        obs, action = batch["observation"], batch["action"]
        assert action.dtype == torch.float32 and action.shape == (*batch.batch_size, 2)
        assert torch.equal(action, StepPolicy()(obs)), "the batch holds what the env did to the action"
        assert (batch["next", "observation"][..., 2] == 1).all()
        assert (batch["next", "observation"][..., 1] == 0).all(), "an action the env kept was overwritten"


@pytest.mark.parametrize("kind", ["single", "sync", "async", "batched"])
def test_gymnasium_envs(kind: str) -> None:
    with build(kind, KeepsActions) as collector:
        check([batch.clone() for batch in collector])


@pytest.mark.parametrize("kind", ["single", "sync"])
def test_vector_env(kind: str) -> None:
    with build(kind, vector_env) as collector:
        check([batch.clone() for batch in collector])


@pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs:FutureWarning")
@pytest.mark.parametrize("kind", ["single", "sync"])
def test_torchrl_env(kind: str) -> None:
    pytest.importorskip("torchrl")
    with build(kind, torchrl_env) as collector:
        check([batch.clone() for batch in collector])
