"""``obs_dtype``: floating-point observations stored (and given to the policy) in another dtype.

The parity test runs the option through every collector; here, what it stores against a plain
run, what it leaves alone, and the errors.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect import Collector

pytestmark = pytest.mark.timeout(60)


class Float64CartPole(gym.Wrapper[np.ndarray, int, np.ndarray, int]):
    """CartPole whose space and observations are float64, as MuJoCo's are."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        space = self.env.observation_space
        assert isinstance(space, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(space.low.astype(np.float64), space.high.astype(np.float64),
                                                dtype=np.float64)

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        return obs.astype(np.float64), info

    def step(self, action: int) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs.astype(np.float64), reward, terminated, truncated, info


def tilt(obs: torch.Tensor) -> torch.Tensor:
    """Push towards the pole's tilt, in whatever dtype the observations come."""
    return (obs[:, 2] > 0).long()


def run(**options: Any) -> list[Any]:
    return list(Collector(Float64CartPole, tilt, num_envs=2, frames_per_batch=2 * 50, total_frames=2 * 150,
                          seed=5, **options))


def test_float64_observations_stored_as_float32_equal_the_float64_run_cast() -> None:
    for cast, plain in zip(run(obs_dtype="float32"), run(), strict=True):
        for key in ("observation", ("next", "observation")):
            assert cast[key].dtype == torch.float32 and plain[key].dtype == torch.float64
            assert torch.equal(cast[key], plain[key].float())
        assert torch.equal(cast["action"], plain["action"])
        assert torch.equal(cast["next", "done"], plain["next", "done"])


def test_a_float32_network_on_float64_observations_says_what_to_pass() -> None:
    net = torch.nn.Linear(4, 2)

    def policy(obs: torch.Tensor) -> torch.Tensor:
        return net(obs).argmax(-1)

    with pytest.raises(RuntimeError, match="dtype") as raised:
        Collector(Float64CartPole, policy, num_envs=2, frames_per_batch=8)
    assert any("obs_dtype='float32'" in note for note in getattr(raised.value, "__notes__", []))
    cast = Collector(Float64CartPole, policy, num_envs=2, frames_per_batch=8, obs_dtype=torch.float32)
    batch = next(iter(cast))
    assert batch["observation"].dtype == torch.float32


def test_integer_observations_are_kept() -> None:
    collector = Collector("FrozenLake-v1", num_envs=2, frames_per_batch=8, obs_dtype=np.float32, seed=0)
    batch = next(iter(collector))
    assert batch["observation"].dtype == torch.int64


@pytest.mark.parametrize("value", ["int8", 5, torch.int32, "float"])
def test_bad_obs_dtype_is_named(value: Any) -> None:
    with pytest.raises(ValueError, match=r"obs_dtype=.* is not one of None, 'float16', 'float32', 'float64'"):
        Collector("CartPole-v1", num_envs=1, frames_per_batch=8, obs_dtype=value)
