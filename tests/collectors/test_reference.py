"""Reference equality: a collector's batches equal a plain Gymnasium loop with the same seeds.

The reference loop below is what a user would write by hand: reset env i with seed + i, call the
policy on the stacked observations, step each env, record the observation the action was chosen
from and the one the step returned, reset in the same step when the episode ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rlcollect import Collector
from tests.envs_for_tests import (
    PendulumPolicy,
    TiltPolicy,
    dict_policy,
    make_cartpole,
    make_dict_env,
    make_pendulum,
)

SEED = 7


def stack_obs(observations: list[Any]) -> Any:
    if isinstance(observations[0], dict):
        return {k: np.stack([np.asarray(o[k]) for o in observations]) for k in observations[0]}
    return np.stack(observations)


def reference_loop(
    make_env: Callable[[], gym.Env[Any, Any]],
    choose: Callable[[Any], np.ndarray],
    num_envs: int,
    num_steps: int,
) -> dict[str, list[list[Any]]]:
    envs = [make_env() for _ in range(num_envs)]
    obs = [env.reset(seed=SEED + i)[0] for i, env in enumerate(envs)]
    rec: dict[str, list[list[Any]]] = {
        k: [[] for _ in range(num_envs)]
        for k in ("obs", "action", "next_obs", "reward", "terminated", "truncated")
    }
    for _ in range(num_steps):
        actions = choose(stack_obs(obs))
        for i, env in enumerate(envs):
            next_obs, reward, terminated, truncated, _ = env.step(actions[i])
            for key, value in (("obs", obs[i]), ("action", actions[i]), ("next_obs", next_obs),
                               ("reward", reward), ("terminated", terminated),
                               ("truncated", truncated)):
                rec[key][i].append(value)
            obs[i] = env.reset()[0] if terminated or truncated else next_obs
    return rec


def check_equal(batch: TensorDict, rec: dict[str, list[list[Any]]], obs_keys: list[str]) -> None:
    def expected(key: str, sub: str | None = None, dtype: Any = None) -> np.ndarray:
        rows = rec[key] if sub is None else [[np.asarray(o[sub]) for o in row] for row in rec[key]]
        return np.array(rows, dtype=dtype)

    for key in obs_keys:
        sub = None if key == "observation" else key
        np.testing.assert_array_equal(batch[key].numpy(), expected("obs", sub))
        np.testing.assert_array_equal(batch["next", key].numpy(), expected("next_obs", sub))
    np.testing.assert_array_equal(batch["action"].numpy(), expected("action"))
    rewards = expected("reward", dtype=np.float32)
    np.testing.assert_array_equal(batch["next", "reward"][..., 0].numpy(), rewards)
    terminated, truncated = expected("terminated", dtype=bool), expected("truncated", dtype=bool)
    np.testing.assert_array_equal(batch["next", "terminated"][..., 0].numpy(), terminated)
    np.testing.assert_array_equal(batch["next", "truncated"][..., 0].numpy(), truncated)
    np.testing.assert_array_equal(batch["next", "done"][..., 0].numpy(), terminated | truncated)
    assert terminated.any() or truncated.any(), "the case must contain episode ends"


def collect(collector: Collector, batches: int) -> TensorDict:
    out = [collector.next() for _ in range(batches)]
    collector.shutdown()
    return torch.cat(out, dim=1)  # type: ignore[arg-type]


def tilt_choose(obs: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return TiltPolicy()(torch.as_tensor(obs)).numpy()


def pendulum_choose(obs: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return PendulumPolicy()(torch.as_tensor(obs)).numpy()


def dict_choose(obs: dict[str, np.ndarray]) -> np.ndarray:
    return dict_policy(torch.as_tensor(obs["pos"]), torch.as_tensor(obs["count"])).numpy()


@pytest.mark.parametrize("num_envs", [1, 4])
def test_cartpole_equals_reference(num_envs: int) -> None:
    steps_per_batch, batches = 25, 6  # episodes of up to 40 steps cross batch boundaries
    rec = reference_loop(make_cartpole, tilt_choose, num_envs, steps_per_batch * batches)
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=steps_per_batch * num_envs,
                          num_envs=num_envs, seed=SEED)
    batch = collect(collector, batches)
    check_equal(batch, rec, ["observation"])
    assert np.array(rec["terminated"]).any() and np.array(rec["truncated"]).any()


@pytest.mark.parametrize("num_envs", [1, 4])
def test_pendulum_equals_reference(num_envs: int) -> None:
    rec = reference_loop(make_pendulum, pendulum_choose, num_envs, 20 * 4)
    collector = Collector(make_pendulum, PendulumPolicy(), frames_per_batch=20 * num_envs,
                          num_envs=num_envs, seed=SEED)
    check_equal(collect(collector, 4), rec, ["observation"])


@pytest.mark.parametrize("num_envs", [1, 4])
def test_dict_observations_equal_reference(num_envs: int) -> None:
    rec = reference_loop(make_dict_env, dict_choose, num_envs, 10 * 5)
    policy = TensorDictModule(dict_policy, in_keys=["pos", "count"], out_keys=["action"])
    collector = Collector(make_dict_env, policy, frames_per_batch=10 * num_envs,
                          num_envs=num_envs, seed=SEED)
    batch = collect(collector, 5)
    check_equal(batch, rec, ["pos", "count"])
    done = batch["next", "done"][..., 0]
    # the true final observation: a reset observation would have count 0
    assert (batch["next", "count"][done] > 0).all()
    assert (batch["count"][:, 1:][done[:, :-1]] == 0).all()  # the frame after an end is a reset


@pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
@pytest.mark.parametrize("make_env,policy,choose", [
    (make_cartpole, TiltPolicy(), tilt_choose),
    (make_pendulum, PendulumPolicy(), pendulum_choose),
])
def test_vector_env_equals_reference(mode: str, make_env: Any, policy: Any, choose: Any) -> None:
    num_envs = 3
    rec = reference_loop(make_env, choose, num_envs, 25 * 4)
    venv = gym.vector.SyncVectorEnv([make_env] * num_envs, autoreset_mode=mode)
    collector = Collector(venv, policy, frames_per_batch=25 * num_envs, seed=SEED)
    check_equal(collect(collector, 4), rec, ["observation"])


def test_vector_env_dict_observations_equal_reference() -> None:
    rec = reference_loop(make_dict_env, dict_choose, 2, 10 * 4)
    venv = gym.vector.SyncVectorEnv([make_dict_env] * 2, autoreset_mode="NextStep")
    policy = TensorDictModule(dict_policy, in_keys=["pos", "count"], out_keys=["action"])
    check_equal(collect(Collector(venv, policy, frames_per_batch=20, seed=SEED), 4), rec, ["pos", "count"])


def test_collector_side_time_limit_equals_reference() -> None:
    """max_frames_per_traj truncates exactly like a TimeLimit wrapper of the same length."""
    def limited() -> gym.Env[Any, Any]:
        return gym.make("CartPole-v1", max_episode_steps=9)

    rec = reference_loop(limited, tilt_choose, 2, 40)
    collector = Collector(lambda: gym.make("CartPole-v1"), TiltPolicy(), frames_per_batch=20,
                          num_envs=2, seed=SEED, max_frames_per_traj=9)
    check_equal(collect(collector, 4), rec, ["observation"])
