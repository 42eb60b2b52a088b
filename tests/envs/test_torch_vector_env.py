"""A batched simulator in torch (``SAME_STEP`` autoreset, torch tensors out, final observations in
``info``): every frame equal to a plain loop written here, every next observation CartPole's step
from its observation and action (the final one where an episode ended), in one process and in
workers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from bench.sims import TorchCartPoleVectorEnv, cartpole_step
from rlcollect import Collector, MultiSyncCollector
from rlcollect.data.checks import BadDataError

pytestmark = pytest.mark.timeout(120)

N, T, SEED = 64, 30, 7


def make() -> TorchCartPoleVectorEnv:
    return TorchCartPoleVectorEnv(N, max_episode_steps=25)


def policy(obs: torch.Tensor) -> torch.Tensor:
    return (obs[:, 2] > 0).long()


def reference(steps: int) -> dict[str, torch.Tensor]:
    """``[N, steps, ...]`` frames of a plain loop: the step's observation, action, reward, flags
    and the true next observation (``info["final_obs"]`` where the env reset itself)."""
    env = make()
    obs, _ = env.reset(seed=SEED)
    out: dict[str, list[torch.Tensor]] = {k: [] for k in ("obs", "action", "reward", "next", "term", "trunc")}
    for _ in range(steps):
        action = policy(obs)
        next_obs, reward, term, trunc, info = env.step(action)
        true_next = next_obs.clone()
        if "final_obs" in info:
            ended = info["_final_obs"]
            true_next[ended] = info["final_obs"][ended]
        for key, value in zip(out, (obs, action, reward, true_next, term, trunc), strict=True):
            out[key].append(value)
        obs = next_obs
    return {key: torch.stack(values, 1) for key, values in out.items()}


def frames(batch: Any) -> dict[str, torch.Tensor]:
    return {"obs": batch["observation"], "action": batch["action"], "reward": batch["next", "reward"][..., 0],
            "next": batch["next", "observation"], "term": batch["next", "terminated"][..., 0],
            "trunc": batch["next", "truncated"][..., 0]}


def test_a_torch_vector_env_gives_the_plain_loops_frames() -> None:
    with Collector(make, policy, frames_per_batch=N * T, total_frames=N * T * 3, seed=SEED) as collector:
        batch = torch.cat([b.clone() for b in collector], 1)
    expected, got = reference(3 * T), frames(batch)
    for key, value in expected.items():
        assert got[key].dtype == (torch.int64 if key == "action" else value.dtype), key
        torch.testing.assert_close(got[key], value, rtol=0, atol=0, msg=key)
    assert got["term"].any() and got["trunc"].any()
    stepped = cartpole_step(batch["observation"].reshape(-1, 4), batch["action"].reshape(-1))
    torch.testing.assert_close(batch["next", "observation"].reshape(-1, 4), stepped, rtol=0, atol=0)


def test_workers_step_their_own_torch_vector_envs() -> None:
    with MultiSyncCollector([make, make], policy, frames_per_batch=2 * N * T, total_frames=2 * N * T,
                            seed=SEED) as collector:
        batch = next(iter(collector))
    assert batch.batch_size == (2 * N, T)
    assert batch["next", "done"].any()
    stepped = cartpole_step(batch["observation"].reshape(-1, 4), batch["action"].reshape(-1))
    torch.testing.assert_close(batch["next", "observation"].reshape(-1, 4), stepped, rtol=0, atol=0)


def test_a_final_observation_of_the_wrong_shape_is_an_error() -> None:
    class Wrong(TorchCartPoleVectorEnv):
        def step(self, actions: Any) -> Any:
            obs, reward, term, trunc, info = super().step(actions)
            if "final_obs" in info:
                info["final_obs"] = info["final_obs"][:, :3]
            return obs, reward, term, trunc, info

    wrong = r"final observation.*shape.*\(\d+, 3\).*\(\d+, 4\)"
    with (Collector(lambda: Wrong(N, max_episode_steps=5), policy, frames_per_batch=N * 10, seed=SEED)
          as collector, pytest.raises(BadDataError, match=wrong)):
        collector.next()


def test_rows_of_gymnasiums_per_env_final_observations_are_stacked() -> None:
    from rlcollect.envs.vector import batch_rows

    per_env = np.array([None, {"a": np.ones(2)}, None, {"a": np.zeros(2)}], dtype=object)
    assert batch_rows(per_env, np.array([1, 3]))["a"].tolist() == [[1.0, 1.0], [0.0, 0.0]]
