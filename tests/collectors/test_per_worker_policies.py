"""``policy_factory`` as a list: each worker builds its own policy and keeps it until an update
for it; ``update_policy_weights_({worker: weights})`` updates those workers only.

Worker 0 builds a policy that always pushes right (action 1), worker 1 one that always pushes
left (action 0); the batches show which policy acted where.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from tests.envs_for_tests import WeightedPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)

FACTORIES = [functools.partial(WeightedPolicy, 1.0), functools.partial(WeightedPolicy, -1.0)]
RIGHT = {"scale": torch.tensor(2.0), "offset": {"bias": torch.tensor(0.0)}}  # makes a policy push right


def actions_by_worker(batches: list[TensorDictBase], versions: dict[int, int]) -> dict[int, set[int]]:
    """The actions each worker's envs took (trajectory ids are strided by worker) in the frames
    stamped with that worker's version in ``versions``."""
    seen: dict[int, set[int]] = {0: set(), 1: set()}
    for batch in batches:
        workers = batch["collector", "traj_ids"] % 2
        for worker in (0, 1):
            rows = (workers == worker) & (batch["policy_version"] == versions[worker])
            seen[worker].update(batch["action"][rows].unique().tolist())
    return seen


def take(stream: Any, batches: int, versions: dict[int, int]) -> dict[int, set[int]]:
    """The actions by worker of ``batches`` batches, and more until each worker delivered frames
    of its version (an asynchronous collector's workers deliver in any order, and a batch asked
    for before an update runs on the weights before it)."""
    taken = [next(stream).clone() for _ in range(batches)]
    while not all(actions_by_worker(taken, versions).values()) and len(taken) < 40:
        taken.append(next(stream).clone())
    return actions_by_worker(taken, versions)


def collect(collector: Any, batches: int, update: dict[int, Any]) -> tuple[dict[int, set[int]], ...]:
    """The actions by worker of ``batches`` batches, then of ``batches`` more after ``update``
    (each updated worker's frames of its next version)."""
    stream = iter(collector)
    before = take(stream, batches, {0: 0, 1: 0})
    collector.update_policy_weights_(update)
    return before, take(stream, batches, {w: int(w in update) for w in (0, 1)})


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_each_worker_runs_its_own_policy_until_an_update_for_it(cls: type) -> None:
    with cls(make_cartpole, policy_factory=FACTORIES, num_workers=2, num_envs_per_worker=2,
             frames_per_batch=20, seed=0) as collector:
        before, after = collect(collector, 2, update={1: RIGHT})
    assert before == {0: {1}, 1: {0}}
    assert after == {0: {1}, 1: {1}}  # worker 1 now pushes right; worker 0 unchanged


def test_a_list_update_is_checked_before_any_worker_gets_it() -> None:
    with MultiSyncCollector(make_cartpole, policy_factory=FACTORIES, num_workers=2,
                            frames_per_batch=10, seed=0) as collector:
        next(iter(collector))
        with pytest.raises(ValueError, match="worker 2 is out of range for num_workers=2"):
            collector.update_policy_weights_({0: RIGHT, 2: RIGHT})
        with pytest.raises(ValueError, match="give the workers once"):
            collector.update_policy_weights_({0: RIGHT}, worker_ids=[1])
        with pytest.raises(TypeError, match="weight names are strings"):
            collector.update_policy_weights_({0: RIGHT, 1: {3: torch.zeros(1)}})
        batch = next(iter(collector))
        assert actions_by_worker([batch], {0: 0, 1: 0}) == {0: {1}, 1: {0}}  # nothing was sent
        assert (batch["policy_version"] == 0).all()


def test_a_list_of_factories_is_one_per_worker() -> None:
    with pytest.raises(ValueError, match="policy_factory has 2 entries for num_workers=3"):
        MultiSyncCollector(make_cartpole, policy_factory=FACTORIES, num_workers=3, frames_per_batch=30)
    with pytest.raises(TypeError, match=r"policy_factory\[1\] must be callable or None, got int"):
        MultiSyncCollector(make_cartpole, policy_factory=[FACTORIES[0], 3], num_workers=2,
                           frames_per_batch=20)
    with pytest.raises(TypeError, match="give one policy_factory, not one per worker"):
        AsyncBatchedCollector(make_cartpole, policy_factory=FACTORIES, num_envs=2, frames_per_batch=20)
    with Collector(make_cartpole, policy_factory=FACTORIES[1:], frames_per_batch=5, total_frames=5) as single:
        assert [b["action"].unique().tolist() for b in single] == [[0]]


@pytest.mark.timeout(240)
def test_ray_actors_run_their_own_policies(ray_session: None) -> None:
    with RayCollector(make_cartpole, policy_factory=FACTORIES, num_collectors=2,
                      collector_kwargs={"num_envs": 2}, frames_per_batch=20, seed=0) as collector:
        before, after = collect(collector, 2, update={0: {"scale": torch.tensor(-2.0),
                                                          "offset": {"bias": torch.tensor(0.0)}}})
    assert before == {0: {1}, 1: {0}}
    assert after == {0: {0}, 1: {0}}
