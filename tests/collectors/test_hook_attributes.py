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
