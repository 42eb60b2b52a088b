"""The random policy: each env's actions from a stream of its own, spawned from the seed, so the
same seed gives every env the same random actions however the envs are split over workers."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlcollect import Collector, MultiSyncCollector
from rlcollect.policies import RandomPolicy

pytestmark = pytest.mark.timeout(120)

SPACES = [spaces.Discrete(5, start=2), spaces.Box(-1.0, 2.0, (3,), np.float32), spaces.MultiDiscrete([3, 4]),
          spaces.MultiBinary(2)]


@pytest.mark.parametrize("space", SPACES, ids=lambda space: type(space).__name__)
def test_each_env_draws_the_same_actions_however_the_envs_are_split(space: spaces.Space) -> None:
    four = RandomPolicy(space, num_envs=4, seed=7)
    halves = [RandomPolicy(space, num_envs=2, seed=7, first_env=first) for first in (0, 2)]
    for steps in (5, 5, 3):  # batch after batch, and a batch of another length
        whole, parts = four.draw(steps), [half.draw(steps) for half in halves]
        assert whole.shape == (4, steps, *space.shape)
        assert np.array_equal(whole, np.concatenate(parts))
        assert all(space.contains(action) for action in whole.reshape(-1, *space.shape).astype(space.dtype))
    other = RandomPolicy(space, num_envs=4, seed=8).draw(5)
    assert not np.array_equal(other, RandomPolicy(space, num_envs=4, seed=7).draw(5))
    assert not np.array_equal(whole[0], whole[1])  # envs do not share a stream


def test_no_env_draws_from_its_own_generators_stream() -> None:
    """Env ``i`` is reset with ``seed + i`` (its ``np_random``, and its action space's, come from
    that seed): the random policy's stream for it is another one."""
    policy = RandomPolicy(spaces.Discrete(2), num_envs=3, seed=0)
    drawn = policy.draw(64)
    for i in range(3):
        own = spaces.Discrete(2, seed=i)
        assert not np.array_equal(drawn[i], [own.sample() for _ in range(64)])
        env_stream = np.random.Generator(np.random.PCG64(np.random.SeedSequence(i)))
        assert not np.array_equal(drawn[i], env_stream.integers(2, size=64))


def test_state_dict_resumes_every_stream() -> None:
    policy = RandomPolicy(spaces.Box(-1.0, 1.0, (2,), np.float32), num_envs=3, seed=1)
    policy.draw(4)
    state = policy.state_dict()
    expected = policy.draw(4)
    resumed = RandomPolicy(spaces.Box(-1.0, 1.0, (2,), np.float32), num_envs=3, seed=99)
    resumed.load_state_dict(state)
    assert np.array_equal(resumed.draw(4), expected)
    with pytest.raises(ValueError, match="must hold 3 env streams"):
        resumed.load_state_dict({"streams": state["streams"][:2]})
    # a state_dict written before per-env streams (one generator's state) still loads, and resumes
    old = dict(spaces.Discrete(2, seed=5).np_random.bit_generator.state)
    resumed.load_state_dict(old)
    again = RandomPolicy(spaces.Box(-1.0, 1.0, (2,), np.float32), num_envs=3)
    again.load_state_dict(old)
    assert np.array_equal(resumed.draw(4), again.draw(4))


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def test_random_batches_of_one_process_and_of_workers_are_the_same() -> None:
    """``Collector`` with 4 envs and ``MultiSyncCollector`` with 2 workers x 2 envs, random actions
    (and ``init_random_frames`` before a policy): the same batches, trajectory ids aside."""
    def tilt(observation: torch.Tensor) -> torch.Tensor:
        return (observation[:, 2] > 0).long()

    for policy, extra in ((None, {}), (tilt, {"init_random_frames": 80})):
        common = {"frames_per_batch": 80, "total_frames": 240, "seed": 3, **extra}
        with Collector(_cartpole, policy, num_envs=4, **common) as one:
            alone = list(one)
        with MultiSyncCollector([_cartpole] * 2, policy, num_envs_per_worker=2, **common) as two:
            split = list(two)
        assert len(alone) == len(split) == 3
        for a, b in zip(alone, split, strict=True):
            a, b = a.exclude(("collector", "traj_ids")), b.exclude(("collector", "traj_ids"))
            assert (a == b).all()
        actions = torch.cat([batch["action"] for batch in alone], dim=1)
        assert 0 < actions.float().mean() < 1  # random, not all one action
