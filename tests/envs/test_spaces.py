"""Every supported space lays out as the batch contract says, nested Dicts as nested keys."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from tensordict.nn import TensorDictModule

from rlcollect import Collector


class ManySpacesEnv(gym.Env[dict[str, Any], np.ndarray]):
    """Observations: MultiBinary, and a nested Dict holding MultiDiscrete and Box; MultiDiscrete
    actions. The observation echoes the last action so the test can check what reached the env."""

    observation_space = spaces.Dict({
        "bits": spaces.MultiBinary(3),
        "inner": spaces.Dict(
            {"last_action": spaces.MultiDiscrete([2, 3]), "x": spaces.Box(-1, 1, (2,))}
        ),
    })
    action_space = spaces.MultiDiscrete([2, 3])

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(np.zeros(2, dtype=np.int64)), {}

    def step(self, action: np.ndarray) -> Any:
        assert self.action_space.contains(np.asarray(action)), action
        self._t += 1
        return self._obs(np.asarray(action)), 1.0, self._t >= 4, False, {}

    def _obs(self, last_action: np.ndarray) -> dict[str, Any]:
        return {
            "bits": self.np_random.integers(0, 2, 3).astype(np.int8),
            "inner": {"last_action": last_action.astype(np.int64),
                      "x": self.np_random.uniform(-1, 1, 2).astype(np.float32)},
        }


def test_nested_dict_multibinary_multidiscrete_layout_with_random_actions() -> None:
    batch = Collector(ManySpacesEnv, None, frames_per_batch=12, num_envs=2, seed=0).next()
    assert batch is not None
    assert batch["bits"].shape == (2, 6, 3) and batch["bits"].dtype == torch.int8
    last_action = batch["inner", "last_action"]
    assert last_action.shape == (2, 6, 2) and last_action.dtype == torch.int64
    assert batch["inner", "x"].dtype == torch.float32
    assert batch["action"].shape == (2, 6, 2) and batch["action"].dtype == torch.int64
    # the action each step sent is what the env echoes back in its next observation
    assert torch.equal(batch["next", "inner", "last_action"], batch["action"])
    assert (batch["action"][..., 0] < 2).all() and (batch["action"][..., 1] < 3).all()


def test_tensordict_policy_reads_nested_keys() -> None:
    def act(bits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([bits[..., 0].long(), (x[..., 0] > 0).long() * 2], -1)

    policy = TensorDictModule(act, in_keys=["bits", ("inner", "x")], out_keys=["action"])
    batch = Collector(ManySpacesEnv, policy, frames_per_batch=8, seed=1).next()
    assert batch is not None
    pushes = (batch["inner", "x"][..., 0] > 0).long() * 2
    expected = torch.stack([batch["bits"][..., 0].long(), pushes], -1)
    assert torch.equal(batch["action"], expected)
