"""Collectors writing into a replay sink, in the background, and yielding complete trajectories."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import Collector, MultiAsyncCollector, MultiSyncCollector
from tests.envs_for_tests import TiltPolicy, make_cartpole


class ListSink:
    """The smallest replay sink: remembers what it was given."""

    def __init__(self) -> None:
        self.batches: list[TensorDictBase] = []

    def extend(self, batch: TensorDictBase) -> None:
        self.batches.append(batch.clone())

    @property
    def write_count(self) -> int:
        return sum(b.numel() for b in self.batches)


def reference_episodes(num_envs: int, seed: int, count: int) -> list[list[np.ndarray]]:
    """Complete episodes (observations) of a plain loop, per env, in time order."""
    episodes: list[list[np.ndarray]] = [[] for _ in range(num_envs)]
    for env_index in range(num_envs):
        env = make_cartpole()
        obs, _ = env.reset(seed=seed + env_index)
        current = []
        while len(episodes[env_index]) < count:
            current.append(obs)
            action = int(TiltPolicy()(torch.as_tensor(obs)).item())
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                episodes[env_index].append(np.stack(current))
                current = []
                obs, _ = env.reset()
    return episodes


def test_batches_go_to_the_sink_flat_and_iteration_yields_none() -> None:
    sink = ListSink()
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=30, total_frames=90, num_envs=3,
                          seed=0, replay_buffer=sink)
    assert list(collector) == [None, None, None]
    assert [b.shape for b in sink.batches] == [torch.Size([30])] * 3
    reference = Collector(make_cartpole, TiltPolicy(), frames_per_batch=30, num_envs=3, seed=0).next()
    assert reference is not None
    assert torch.equal(sink.batches[0]["observation"], reference["observation"].reshape(30, 4))


@pytest.mark.parametrize("num_envs", [1, 2])
def test_trajs_per_batch_yields_complete_episodes_equal_to_the_reference(num_envs: int) -> None:
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=16 * num_envs, num_envs=num_envs,
                          seed=4, trajs_per_batch=3, traj_format="padded")
    episodes = []
    for _ in range(3):
        batch = collector.next()
        assert batch is not None and batch.shape[0] == 3
        mask = batch["collector", "mask"]
        for row in range(3):
            length = int(mask[row].sum())
            assert mask[row, :length].all() and not mask[row, length:].any()
            done = batch["next", "done"][row, :length, 0]
            assert done[-1] and not done[:-1].any()  # done only at its last step
            ids = batch["collector", "traj_ids"][row, :length]
            assert (ids == ids[0]).all()
            episodes.append(batch["observation"][row, :length].numpy())
    expected = reference_episodes(num_envs, seed=4, count=9)
    for episode in episodes:  # every yielded episode is one of the reference loop's, whole
        assert any(len(e) == len(episode) and np.array_equal(e, episode) for env in expected for e in env)
    lengths = [len(e) for e in episodes]
    assert max(lengths) > 16  # some episodes crossed batch boundaries and were reassembled


def test_trajs_per_batch_cat_format() -> None:
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=10, seed=1, trajs_per_batch=2,
                          traj_format="cat")
    batch = collector.next()
    assert batch is not None and batch.batch_dims == 1
    done = batch["next", "done"][:, 0]
    assert int(done.sum()) == 2 and bool(done[-1])
    assert ("collector", "mask") not in batch.keys(True)


def test_trajs_per_batch_with_a_sink_writes_flat_episodes() -> None:
    sink = ListSink()
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=10, seed=1, trajs_per_batch=2,
                          replay_buffer=sink)
    while not sink.batches:  # one None per batch, whether or not an episode ended in it
        assert collector.next() is None
    assert sink.batches[0].batch_dims == 1 and bool(sink.batches[0]["next", "done"][-1])
    collector.shutdown()


def test_init_random_frames_counts_the_sink_writes() -> None:
    sink = ListSink()
    sink.batches.append(Collector("CartPole-v1", None, frames_per_batch=50).next())  # type: ignore[arg-type]
    collector = Collector("CartPole-v1", lambda obs: torch.zeros(obs.shape[0], dtype=torch.long),
                          frames_per_batch=50, init_random_frames=50, replay_buffer=sink, seed=0)
    collector.next()
    assert (sink.batches[-1]["action"] == 0).all()  # the buffer already held 50 frames


def test_background_collection_and_pause() -> None:
    sink = ListSink()
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=20, seed=0, replay_buffer=sink)
    collector.start()
    deadline = time.monotonic() + 20
    while sink.write_count < 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sink.write_count >= 100
    with collector.pause():
        held = sink.write_count
        time.sleep(0.3)
        assert sink.write_count == held
    deadline = time.monotonic() + 20
    while sink.write_count == held and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sink.write_count > held
    start = time.monotonic()
    collector.async_shutdown(timeout=5)
    assert time.monotonic() - start < 5
    stopped = sink.write_count
    time.sleep(0.1)
    assert sink.write_count == stopped


@pytest.mark.timeout(60)
def test_a_pause_right_after_a_pause_waits_for_the_collection_to_stop_again() -> None:
    """``pause()`` entered at once after the previous one ended still holds the writes (it once
    found the previous pause's flag and returned while a batch was being collected)."""
    sink = ListSink()
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=20, seed=0, replay_buffer=sink)
    collector.start()
    try:
        counts = []
        for _ in range(20):
            with collector.pause():
                held = sink.write_count
                time.sleep(0.02)
                counts.append((held, sink.write_count, collector.stats().frames))
        assert all(held == after == frames for held, after, frames in counts), counts
    finally:
        collector.async_shutdown(timeout=10)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("collector_class", [MultiSyncCollector, MultiAsyncCollector])
def test_multi_process_background_collection_into_a_parent_sink(collector_class: Any) -> None:
    sink = ListSink()
    collector = collector_class(make_cartpole, TiltPolicy(), num_workers=2, frames_per_batch=20, seed=0,
                                replay_buffer=sink)
    collector.start()
    deadline = time.monotonic() + 60
    while sink.write_count < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    with collector.pause():
        held = sink.write_count
        time.sleep(0.3)
        assert sink.write_count == held
    collector.async_shutdown(timeout=10)
    assert held >= 200
    ids = torch.cat([b["collector", "traj_ids"] for b in sink.batches])
    observations = torch.cat([b["observation"] for b in sink.batches])
    assert len(ids) == sink.write_count and observations.shape == (sink.write_count, 4)


def test_delivery_argument_errors() -> None:
    with pytest.raises(TypeError, match=r"replay_buffer must have an extend\(TensorDict\) method .*int 3"):
        Collector("CartPole-v1", frames_per_batch=4, replay_buffer=3)
    with pytest.raises(ValueError, match="trajs_per_batch must be a positive int or None, got 0"):
        Collector("CartPole-v1", frames_per_batch=4, trajs_per_batch=0)
    with pytest.raises(ValueError, match="traj_format='cat' needs trajs_per_batch"):
        Collector("CartPole-v1", frames_per_batch=4, traj_format="cat")
    with pytest.raises(ValueError, match="traj_format must be 'padded' or 'cat', got 'flat'"):
        Collector("CartPole-v1", frames_per_batch=4, trajs_per_batch=1, traj_format="flat")
    with pytest.raises(ValueError, match="split_trajs and trajs_per_batch exclude each other"):
        Collector("CartPole-v1", frames_per_batch=4, trajs_per_batch=1, split_trajs=True)
    collector = Collector("CartPole-v1", frames_per_batch=4)
    with pytest.raises(RuntimeError, match="start\\(\\) needs replay_buffer= at construction"):
        collector.start()
    with pytest.raises(RuntimeError, match="call start\\(\\) first"), collector.pause():
        pass
