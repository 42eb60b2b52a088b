"""The collect hooks as attributes (TorchRL's): read, and set after construction."""

from __future__ import annotations

import os
from typing import Any

import pytest

from rlcollect import Collector, MultiSyncCollector
from tests.envs_for_tests import TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)


def count_pid(path: str) -> None:
    """A pre-collect hook that a worker can run: appends its process id to ``path``."""
    with open(path, "a") as file:
        file.write(f"{os.getpid()}\n")


def test_hooks_are_attributes_that_can_be_set() -> None:
    calls: list[Any] = []
    with Collector(make_cartpole, TiltPolicy(), frames_per_batch=8, total_frames=24) as collector:
        assert collector.pre_collect_hook is None and collector.post_collect_hook is None
        collector.next()
        collector.pre_collect_hook = lambda: calls.append("pre")
        collector.post_collect_hook = lambda batch: calls.append(batch.numel())
        collector.next()
        collector.next()
        assert collector.pre_collect_hook is not None and collector.post_collect_hook is not None
        collector.pre_collect_hook = None
        assert collector.next() is None  # total_frames reached: no batch, no call
    assert calls == ["pre", 8, "pre", 8]
    with pytest.raises(TypeError, match="post_collect_hook must be callable or None, got int 3"):
        Collector(make_cartpole, TiltPolicy(), frames_per_batch=8).post_collect_hook = 3  # type: ignore[assignment]


def test_with_workers_the_pre_hook_is_set_before_the_first_batch(tmp_path: Any) -> None:
    path = str(tmp_path / "pids")
    with MultiSyncCollector(make_cartpole, TiltPolicy(), num_workers=2, frames_per_batch=8) as collector:
        collector.pre_collect_hook = lambda: count_pid(path)
        collector.next()
        with pytest.raises(RuntimeError, match="runs in the workers, which got theirs when they started"):
            collector.pre_collect_hook = None
    with open(path) as file:
        pids = {int(line) for line in file}
    assert len(pids) == 2 and os.getpid() not in pids


def count_frames(path: str, batch: Any) -> None:
    """A post-collect hook that a worker can run: appends its process id and the batch's frames."""
    with open(path, "a") as file:
        file.write(f"{os.getpid()} {batch.numel()} {tuple(batch.batch_size)}\n")


def test_with_workers_the_post_hook_runs_in_each_worker_on_its_batch(tmp_path: Any) -> None:
    """As TorchRL's multi-process collectors: each worker calls post_collect_hook with its own
    batch (in the collector's layout); this process does not; it can be set before the first batch."""
    import functools

    from rlcollect.torchrl import MultiSyncCollector as TorchRLMultiSync

    for layout, cls, shape in (("native", MultiSyncCollector, (2, 5)), ("torchrl", TorchRLMultiSync, (2, 5))):
        path = str(tmp_path / layout)
        with cls(make_cartpole, TiltPolicy(), num_workers=2, num_envs_per_worker=2, frames_per_batch=20,
                 total_frames=40) as collector:
            collector.post_collect_hook = functools.partial(count_frames, path)
            batches = list(collector)
            with pytest.raises(RuntimeError, match="post_collect_hook runs in the workers"):
                collector.post_collect_hook = None
        with open(path) as file:
            calls = [line.split(" ", 2) for line in file]
        assert len(batches) == 2 and len(calls) == 4
        assert len({pid for pid, _, _ in calls}) == 2 and str(os.getpid()) not in {pid for pid, _, _ in calls}
        assert {(frames, size.strip()) for _, frames, size in calls} == {("10", str(shape))}
