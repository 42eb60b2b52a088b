"""A forked worker never finalises this process's garbage: objects it inherited are frozen for its
garbage collector (a finaliser of a native object whose threads did not cross the fork crashed a
worker). :class:`Finalised` stands for such an object: its finaliser records the process it ran in."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import pytest

from rlcollect import MultiSyncCollector

pytestmark = pytest.mark.timeout(120)


class Finalised:
    """Records the process it is finalised in, in ``folder``; held in a reference cycle, so only
    the garbage collector finalises it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cycle: Any = self

    def __del__(self) -> None:
        (self.folder / str(os.getpid())).touch()


def collect_garbage(worker_idx: int) -> None:
    """A worker's full collection, first thing (a long-running worker's collector gets there)."""
    gc.collect()


def test_a_forked_worker_does_not_finalise_the_parents_garbage(tmp_path: Path) -> None:
    held = Finalised(tmp_path)
    gc.collect()  # held survives: it is among the oldest objects, which only a full collection reads
    gc.disable()  # no collection here until the workers started: held stays garbage until then
    try:
        del held
        with MultiSyncCollector("CartPole-v1", num_workers=2, frames_per_batch=8, total_frames=16,
                                start_method="fork", worker_init_fn=collect_garbage) as collector:
            batches = sum(1 for _ in collector)
    finally:
        gc.enable()
    gc.collect()
    assert batches == 2
    assert sorted(int(path.name) for path in tmp_path.iterdir()) == [os.getpid()]
