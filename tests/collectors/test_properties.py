"""Property tests: frame accounting and trajectory ids hold for any batch geometry."""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcollect import Collector
from rlcollect.data.trajectories import TrajectoryIds

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    frames_per_batch=st.integers(1, 60),
    total_frames=st.integers(1, 300),
    num_envs=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
def test_frames_length_and_ids(frames_per_batch: int, total_frames: int, num_envs: int, seed: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frames_per_batch rounded up to a multiple of num_envs
        collector = Collector("CartPole-v1", None, frames_per_batch=frames_per_batch,
                              total_frames=total_frames, num_envs=num_envs, seed=seed)
    steps = math.ceil(frames_per_batch / num_envs)
    assert collector.frames_per_batch == steps * num_envs
    batches = list(collector)
    assert len(batches) == len(collector) == math.ceil(total_frames / collector.frames_per_batch)
    assert sum(b.numel() for b in batches) == len(batches) * collector.frames_per_batch >= total_frames
    assert collector.stats().frames == len(batches) * collector.frames_per_batch
    data = torch.cat(batches, dim=1)  # type: ignore[arg-type]
    ids = data["collector", "traj_ids"].numpy()
    done = data["next", "done"][..., 0].numpy()
    # within an env: ids never decrease, and change exactly after a done
    assert (np.diff(ids, axis=1) >= 0).all()
    np.testing.assert_array_equal(np.diff(ids, axis=1) > 0, done[:, :-1])
    # no id is shared by two envs
    owners = {}
    for env, row in enumerate(ids):
        for traj in np.unique(row):
            assert owners.setdefault(int(traj), env) == env
    assert collector.stats().episodes == int(done.sum())
    collector.shutdown()


@SETTINGS
@given(
    done=st.lists(st.lists(st.booleans(), min_size=1, max_size=6), min_size=1, max_size=5).filter(
        lambda rows: len({len(r) for r in rows}) == 1
    ),
    batches=st.integers(1, 4),
    stride=st.integers(1, 3),
)
def test_trajectory_ids_unique_and_continuous(done: list[list[bool]], batches: int, stride: int) -> None:
    flags = np.array(done)
    allocators = [TrajectoryIds(len(flags), stride=stride, offset=o) for o in range(stride)]
    seen: dict[int, tuple[int, int]] = {}
    for producer, allocator in enumerate(allocators):
        previous_last, previous_done = None, None
        for _ in range(batches):
            out = np.zeros(flags.shape, dtype=np.int64)
            allocator.assign(flags, out)
            assert ((out - producer) % stride == 0).all()
            if previous_last is not None:
                changed = out[:, 0] != previous_last
                np.testing.assert_array_equal(changed, previous_done)
            for env, row in enumerate(out):
                for traj in np.unique(row):
                    assert seen.setdefault(int(traj), (producer, env)) == (producer, env)
            previous_last, previous_done = out[:, -1].copy(), flags[:, -1]
