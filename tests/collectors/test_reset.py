"""``reset()`` in every collector: the envs restart at once, the next batches start new trajectories;
``reset_idx`` (collectors with workers) chooses the workers."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from tests.envs_for_tests import CountingEnv

pytestmark = pytest.mark.timeout(120)

EPISODE, T = 7, 5  # an episode ends 7 steps after its reset; a batch holds 5 steps of each env
make_env = functools.partial(CountingEnv, episode_length=EPISODE)


def parity(obs: torch.Tensor) -> torch.Tensor:
    return obs[..., 1].long() % 2


def build(kind: type) -> Any:
    if kind is Collector:
        return Collector(make_env, num_envs=2, frames_per_batch=2 * T, seed=0)
    if kind is AsyncBatchedCollector:
        return AsyncBatchedCollector([make_env, make_env], parity, envs_per_worker=1, frames_per_batch=T,
                                     seed=0)
    if kind is RayCollector:
        return RayCollector(make_env, num_collectors=2, frames_per_batch=2 * T, seed=0)
    frames = 2 * T if kind is MultiSyncCollector else T
    return kind(make_env, num_workers=2, frames_per_batch=frames, seed=0)


def rows(batch: TensorDictBase) -> dict[int, tuple[list[int], list[bool]]]:
    """Each env's row of a batch, by env (the env's id, its first observation): its trajectory ids
    and where it ended an episode."""
    batch = batch.reshape(-1, batch.batch_size[-1])
    return {int(batch["observation"][i, 0, 0]): (batch["collector", "traj_ids"][i].tolist(),
                                                   batch["next", "done"][i].reshape(-1).tolist())
            for i in range(batch.batch_size[0])}


@pytest.mark.parametrize("kind", [Collector, MultiSyncCollector, MultiAsyncCollector, AsyncBatchedCollector])
def test_reset_restarts_every_env_and_starts_new_trajectories(kind: type) -> None:
    with build(kind) as collector:
        seen: set[int] = set()
        before: dict[int, int] = {}  # env -> the batches it delivered before reset
        iterator = iter(collector)
        while len(before) < 2:  # each env at least 5 steps into its first episode
            for env, (ids, _) in rows(next(iterator)).items():
                seen.update(ids)
                before[env] = before.get(env, 0) + 1
        collector.reset()
        fresh: dict[int, list[bool]] = {}
        late = dict.fromkeys(before, 0)  # batches collected before the reset, yielded after it
        for _ in range(6):  # at most a batch in flight per env, then the fresh ones
            if len(fresh) == 2:
                break
            for env, (ids, done) in rows(next(iterator)).items():
                if env in fresh:
                    continue
                if set(ids) & seen:  # collected before the reset: it continues the episode
                    late[env] += 1
                    seen.update(ids)
                    continue
                assert len(set(ids)) == 1
                fresh[env] = done
    # a reset episode ends 7 steps later: none of these 5 steps ends it
    assert fresh == {0: [False] * T, 1: [False] * T}
    assert all(count <= 1 for count in late.values())
    if kind in (Collector, MultiSyncCollector, RayCollector):
        assert late == {0: 0, 1: 0} and before == {0: 1, 1: 1}


def test_ray_collector_reset(ray_session: None) -> None:
    test_reset_restarts_every_env_and_starts_new_trajectories(RayCollector)


def test_reset_idx_resets_the_workers_it_marks() -> None:
    with MultiSyncCollector(make_env, num_workers=2, frames_per_batch=2 * T, seed=0) as collector:
        first = rows(collector.next())
        collector.reset([True, False])
        second = rows(collector.next())
        assert second[0][1] == [False] * T and second[0][0][0] not in first[0][0]  # worker 0: reset
        assert second[1][1] == [False, True, False, False, False]  # worker 1: its episode went on
        assert second[1][0][0] == first[1][0][-1]
        for wrong in ([True], [True, "yes"], [1, 2]):
            with pytest.raises(ValueError, match=r"reset_idx=.*one True/False flag per worker \(2\)"):
                collector.reset(wrong)


def test_a_collector_with_workers_shows_the_policy_given() -> None:
    with MultiSyncCollector(make_env, parity, num_workers=2, frames_per_batch=2 * T) as collector:
        assert collector.policy is parity
    with MultiAsyncCollector(make_env, num_workers=2, frames_per_batch=T,
                             policy_factory=lambda: parity) as collector:
        assert collector.policy is None


@pytest.mark.parametrize("kind", [Collector, MultiSyncCollector, MultiAsyncCollector, AsyncBatchedCollector])
def test_no_batch_after_shutdown_even_one_collected_before(kind: type) -> None:
    """An asynchronous collector keeps the batches its workers collected before a ``reset``; once
    shut down, it hands out none of them: every collector raises."""
    collector = build(kind)
    collector.next()
    collector.reset()  # asynchronous: each worker's batch under way is kept, to be yielded next
    collector.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        collector.next()
