"""Resume where the state holds no envs (their state is not data, or TorchRL envs, which are never
pickled into it): the loading collector's envs go on with their own episodes, under trajectory
ids the saved run never handed out. No frame may pair an observation the saved envs held with a
step of the new envs (a transition that never happened): the first batch after the load is the
batch a fresh collector would collect, ids aside."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import Collector, MultiSyncCollector
from tests.envs_for_tests import TiltPolicy, assert_same_but_ids, make_cartpole, resumed_beside_fresh

pytestmark = pytest.mark.timeout(120)


class Unpicklable(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole holding a lock: not data, so a state_dict cannot hold it."""

    def __init__(self) -> None:
        super().__init__(make_cartpole())
        self.lock = threading.Lock()


def make_unpicklable() -> gym.Env[Any, Any]:
    return Unpicklable()


def single(frames_per_batch: int = 30) -> Any:
    return Collector(make_unpicklable, TiltPolicy(), num_envs=2, frames_per_batch=frames_per_batch, seed=3)


def multi_sync() -> Any:
    return MultiSyncCollector(make_unpicklable, TiltPolicy(), num_workers=2, frames_per_batch=30, seed=3)


def ids_of(batch: TensorDictBase) -> torch.Tensor:
    ids: torch.Tensor = batch["collector", "traj_ids"]
    return ids


@pytest.mark.parametrize("build", [single, multi_sync], ids=["Collector", "MultiSyncCollector"])
def test_resumed_envs_start_from_their_own_reset(build: Callable[[], Any]) -> None:
    before, batch, reference, frames = resumed_beside_fresh(build, 3)
    assert frames == 4 * batch.numel()  # the counters continue
    assert_same_but_ids(batch, reference)
    # the saved envs' next observations are not the first frame of the resumed batch
    assert not torch.equal(batch["observation"][:, 0], before[-1]["next", "observation"][:, -1])
    handed_out = set(torch.cat([ids_of(b).flatten() for b in before]).tolist())
    assert not handed_out & set(ids_of(batch).flatten().tolist())  # new trajectories, no id reused
    # each env's trajectory keeps one id along its rows until it ends (a fresh collector's pattern)
    same = ids_of(reference)[:, 1:] == ids_of(reference)[:, :-1]
    assert torch.equal(ids_of(batch)[:, 1:] == ids_of(batch)[:, :-1], same)


def test_episodes_in_progress_are_not_carried_into_the_new_envs() -> None:
    with single(100) as saved:
        for _ in range(3):
            saved.next()
        with pytest.warns(UserWarning, match="envs' state is not data"):
            state = saved.state_dict()
        count = saved.stats().episodes
    with single(100) as fresh:
        fresh.next()
        reference = fresh.episodes()
    with single(100) as resumed:
        resumed.load_state_dict(state)
        resumed.episodes()  # the saved run's, drained
        resumed.next()
        table = resumed.episodes()
        assert resumed.stats().episodes == count + reference.batch_size[0]
    assert reference.batch_size[0] > 0  # episodes end in the first batch
    # the same returns and lengths as a fresh collector's: no running sum of the saved episodes
    torch.testing.assert_close(table["return"], reference["return"])
    torch.testing.assert_close(table["length"], reference["length"])
