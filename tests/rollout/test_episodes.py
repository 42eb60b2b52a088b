"""Episode returns and lengths, counted per batch, equal a step-by-step count over the stream."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcollect.rollout.episodes import EpisodeTracker


@settings(max_examples=50, deadline=None)
@given(
    num_envs=st.integers(1, 4),
    num_steps=st.integers(1, 6),
    batches=st.integers(1, 5),
    end_rate=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
)
def test_tracker_equals_a_step_by_step_count(
    num_envs: int, num_steps: int, batches: int, end_rate: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    reward = rng.normal(size=(num_envs, num_steps * batches))
    done = rng.random((num_envs, num_steps * batches)) < end_rate
    expected = []  # (batch, env, step, return, length): the order the tracker reports in
    for env in range(num_envs):
        total, length = 0.0, 0
        for t in range(num_steps * batches):
            total, length = total + reward[env, t], length + 1
            if done[env, t]:
                expected.append((t // num_steps, env, t, total, length))
                total, length = 0.0, 0
    expected.sort()
    tracker = EpisodeTracker(num_envs, window=10_000)
    for b in range(batches):
        window = slice(b * num_steps, (b + 1) * num_steps)
        tracker.update(reward[:, window], done[:, window])
    assert tracker.count == len(expected)
    np.testing.assert_allclose(list(tracker.returns), [e[3] for e in expected])
    assert list(tracker.lengths) == [e[4] for e in expected]


@settings(max_examples=50, deadline=None)
@given(
    num_envs=st.integers(1, 4),
    frames=st.integers(1, 12),
    batches=st.integers(1, 4),
    end_rate=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
)
def test_stream_tracker_equals_a_step_by_step_count(
    num_envs: int, frames: int, batches: int, end_rate: float, seed: int
) -> None:
    """Frames of any env in any order (an asynchronous pool's batches): each env's episodes are
    summed over its own frames, across batches."""
    rng = np.random.default_rng(seed)
    envs = rng.integers(0, num_envs, size=frames * batches)
    reward = rng.normal(size=frames * batches)
    done = rng.random(frames * batches) < end_rate
    expected = {}  # flat index of the last frame -> (return, length)
    total, length = np.zeros(num_envs), np.zeros(num_envs, dtype=int)
    for k, env in enumerate(envs.tolist()):
        total[env], length[env] = total[env] + reward[k], length[env] + 1
        if done[k]:
            expected[k] = (total[env], int(length[env]))
            total[env], length[env] = 0.0, 0
    tracker = EpisodeTracker(num_envs, window=10_000)
    traj_ids, versions = np.arange(frames).reshape(1, frames), np.zeros((1, frames), dtype=np.int64)
    got = {}
    for b in range(batches):
        window = slice(b * frames, (b + 1) * frames)
        tracker.update_stream(envs[window], reward[window], done[window], num_steps=frames)
        tracker.label(traj_ids, versions)
        records = tracker.records.drain()
        assert records["env"].tolist() == envs[window][records["traj_id"]].tolist()
        for k, value, n in zip(records["traj_id"], records["return"], records["length"], strict=True):
            got[b * frames + int(k)] = (value, int(n))
    assert tracker.count == len(expected) and sorted(got) == sorted(expected)
    for k, (value, n) in expected.items():
        assert got[k][0] == pytest.approx(value) and got[k][1] == n


def numbered(first: int, count: int) -> dict[str, np.ndarray]:
    from rlcollect.rollout.episodes import EPISODE_FIELDS

    return {name: np.arange(first, first + count).astype(dtype) for name, dtype in EPISODE_FIELDS.items()}


def test_episode_records_keep_the_last_ones_in_memory_allocated_once() -> None:
    from rlcollect.rollout.episodes import MAX_RECORDS, EpisodeRecords

    records = EpisodeRecords()
    allocated = sum(ring.nbytes for ring in records._rings.values())
    assert allocated < 500_000
    for first in range(0, 100_000, 37):  # never drained: 100,000 episodes in batches of 37
        count = min(37, 100_000 - first)
        records.add(numbered(first, count))
    assert sum(ring.nbytes for ring in records._rings.values()) == allocated  # nothing grew
    drained = records.drain()
    assert drained["traj_id"].tolist() == list(range(100_000 - MAX_RECORDS, 100_000))  # the last, in order
    assert records.dropped == 100_000 - MAX_RECORDS
    assert len(records.drain()["traj_id"]) == 0
    records.add(numbered(0, 5 * MAX_RECORDS // 2))  # more than the ring holds, at once
    assert records.drain()["length"].tolist() == list(range(3 * MAX_RECORDS // 2, 5 * MAX_RECORDS // 2))
