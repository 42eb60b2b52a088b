"""Exact resume in every mode: stop after k batches, save the state, build a new collector, load it,
continue. The batches equal an uninterrupted run's, value for value, trajectory ids included.

A state taken between two batches holds the batches the workers were producing (prefetch, async):
the resumed collector yields them first, so none is lost and none is repeated. Asynchronous
batches come in whichever order the workers finish, so each worker's sequence is compared.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from tests.envs_for_tests import TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(150)

BATCHES, STOP_AFTER = 6, 2


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """The state through ``torch.save`` / ``torch.load``, as a user would keep it (``torch.load``'s
    default ``weights_only=True``: tensors, numbers, strings and containers only)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer)
    return loaded


def take(collector: Any, count: int) -> list[TensorDictBase]:
    batches = [collector.next() for _ in range(count)]
    assert all(b is not None for b in batches)
    return [b.clone() for b in batches]


Batches = list[TensorDictBase]


def by_worker(batches: Batches) -> dict[int, Batches]:
    """Batches grouped by the worker that produced them (ids are strided by worker, 2 workers)."""
    groups: dict[int, Batches] = {0: [], 1: []}
    for batch in batches:
        groups[int(batch["collector", "traj_ids"][0, 0]) % 2].append(batch)
    return groups


def enough(batches: Batches, per_worker: bool) -> bool:
    """``BATCHES`` batches; asynchronously, ``BATCHES // 2`` from each worker (however they interleave)."""
    if per_worker:
        return all(len(group) >= BATCHES // 2 for group in by_worker(batches).values())
    return len(batches) >= BATCHES


def interrupted_and_uninterrupted(
    build: Callable[[], Any], per_worker: bool = False
) -> tuple[Batches, Batches]:
    def take_until_enough(collector: Any, batches: Batches) -> Batches:
        while not enough(batches, per_worker) and len(batches) < 10 * BATCHES:
            batches += take(collector, 1)
        return batches

    with build() as collector:
        uninterrupted = take_until_enough(collector, [])
    with build() as collector:
        resumed = take(collector, STOP_AFTER)
        state = roundtrip(collector.state_dict())
    with build() as collector:
        collector.load_state_dict(state)
        resumed = take_until_enough(collector, resumed)
    return uninterrupted, resumed


def assert_same(uninterrupted: list[TensorDictBase], resumed: list[TensorDictBase]) -> None:
    assert len(uninterrupted) == len(resumed)
    for want, have in zip(uninterrupted, resumed, strict=True):
        assert want.batch_size == have.batch_size and (want == have).all()


def assert_same_per_worker(uninterrupted: Batches, resumed: Batches) -> None:
    """Each worker's first ``BATCHES // 2`` batches are the same in both runs."""
    want, have = by_worker(uninterrupted), by_worker(resumed)
    for worker in (0, 1):
        assert_same(want[worker][: BATCHES // 2], have[worker][: BATCHES // 2])


def single() -> Collector:
    return Collector(make_cartpole, TiltPolicy(), num_envs=4, frames_per_batch=40, seed=5)


def multi(cls: type, **kwargs: Any) -> Callable[[], Any]:
    return lambda: cls(make_cartpole, TiltPolicy(), num_workers=2, num_envs_per_worker=2, seed=5, **kwargs)


def ray_collector(**kwargs: Any) -> Callable[[], Any]:
    return lambda: RayCollector(make_cartpole, TiltPolicy(), num_collectors=2,
                                collector_kwargs={"num_envs": 2}, seed=5, **kwargs)


def test_single_process() -> None:
    assert_same(*interrupted_and_uninterrupted(single))


@pytest.mark.parametrize("prefetch", [False, True])
def test_multi_sync(prefetch: bool) -> None:
    uninterrupted, resumed = interrupted_and_uninterrupted(
        multi(MultiSyncCollector, frames_per_batch=40, prefetch=prefetch))
    assert_same(uninterrupted, resumed)
    with single() as reference:  # and the same frames as one process with the same envs
        expected = take(reference, BATCHES)
    for want, have in zip(expected, resumed, strict=True):
        assert (want.exclude(("collector", "traj_ids")) == have.exclude(("collector", "traj_ids"))).all()


def test_multi_async() -> None:
    runs = interrupted_and_uninterrupted(multi(MultiAsyncCollector, frames_per_batch=20), per_worker=True)
    assert_same_per_worker(*runs)


def test_async_batched() -> None:
    """The served policy's weights and version are in the state too (a deterministic policy:
    the frames do not depend on the order the workers' requests reach the server)."""
    def build() -> AsyncBatchedCollector:
        return AsyncBatchedCollector(make_cartpole, TiltPolicy(), num_envs=4, envs_per_worker=2, seed=5,
                                     frames_per_batch=20)

    runs = interrupted_and_uninterrupted(build, per_worker=True)
    assert_same_per_worker(*runs)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("sync", "prefetch"), [(True, False), (True, True), (False, False)])
def test_ray(ray_session: None, sync: bool, prefetch: bool) -> None:
    frames = 40 if sync else 20
    runs = interrupted_and_uninterrupted(ray_collector(frames_per_batch=frames, sync=sync, prefetch=prefetch),
                                         per_worker=not sync)
    (assert_same if sync else assert_same_per_worker)(*runs)
