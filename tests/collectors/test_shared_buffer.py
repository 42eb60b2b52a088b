"""Workers write a shared or memmap ReplayBuffer themselves: every frame once, none torn."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from rlcollect import AsyncBatchedCollector, MultiAsyncCollector, MultiSyncCollector, ReplayBuffer
from tests.envs_for_tests import CountingEnv, TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)


def check_frames(buffer: ReplayBuffer, expected_frames: int, uids: list[int]) -> None:
    data = buffer.data[: len(buffer)]
    assert buffer.write_count == expected_frames == len(buffer)
    uid, step = data["observation"][:, 0].long(), data["observation"][:, 1].long()
    # nothing torn: a frame's fields all come from the same env step
    assert torch.equal(data["next", "observation"][:, 0].long(), uid)
    assert torch.equal(data["next", "observation"][:, 1].long(), step + 1)
    assert sorted(uid.unique().tolist()) == uids
    for env_uid in uids:
        in_buffer_order = step[uid == env_uid]
        # every frame of every env exactly once, in time order (each worker writes its rows in order)
        assert torch.equal(in_buffer_order, torch.arange(len(in_buffer_order)))


@pytest.mark.parametrize("storage", ["shared", "memmap"])
def test_workers_extend_the_buffer_directly(storage: str, tmp_path: Path) -> None:
    buffer = ReplayBuffer(1000, storage=storage, path=tmp_path / "rb" if storage == "memmap" else None)
    env = functools.partial(CountingEnv, episode_length=6)
    with MultiAsyncCollector(env, None, num_workers=2, num_envs_per_worker=2, frames_per_batch=10,
                             total_frames=200, seed=10, replay_buffer=buffer) as collector:
        assert all(batch is None for batch in collector)
    check_frames(buffer, 200, [10, 11, 12, 13])


def test_background_collection_into_a_shared_buffer_pauses() -> None:
    buffer = ReplayBuffer(100_000, storage="shared")
    collector = MultiSyncCollector(functools.partial(CountingEnv, episode_length=6), None, num_workers=2,
                                   frames_per_batch=20, seed=0, replay_buffer=buffer)
    collector.start()
    deadline = time.monotonic() + 60
    while buffer.write_count < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    with collector.pause():
        held = buffer.write_count
        time.sleep(0.3)
        assert buffer.write_count == held
    collector.async_shutdown(timeout=10)
    assert held >= 200 and buffer.write_count % 20 == 0
    check_frames(buffer, buffer.write_count, [0, 1])


@pytest.mark.parametrize("kind", ["sync", "async", "batched"])
def test_stats_count_the_frames_the_workers_wrote_while_paused_and_after_shutdown(kind: str) -> None:
    """Background collection into a shared buffer: within ``pause()`` (batches that finished while
    pausing are not handed out yet) and after ``async_shutdown()`` (batches that finished while
    stopping), ``stats().frames`` equals the frames in the buffer."""
    buffer = ReplayBuffer(100_000, storage="shared")
    if kind == "batched":
        collector: Any = AsyncBatchedCollector(make_cartpole, TiltPolicy(), num_envs=2, frames_per_batch=20,
                                               replay_buffer=buffer)
    else:
        cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
        collector = cls(make_cartpole, TiltPolicy(), num_workers=2, frames_per_batch=20, replay_buffer=buffer)
    collector.start()
    try:
        for target in (200, 400):
            deadline = time.monotonic() + 60
            while len(buffer) < target and time.monotonic() < deadline:
                time.sleep(0.02)
            with collector.pause():
                assert collector.stats().frames == len(buffer) == buffer.write_count >= target
    finally:  # a failure here must not leave the workers running into the next tests
        collector.async_shutdown()
    assert collector.stats().frames == len(buffer) == buffer.write_count
