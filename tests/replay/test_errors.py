"""Bad ReplayBuffer arguments fail at construction, naming the argument, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rlcollect.replay import ReplayBuffer
from tests.replay.frames_for_tests import make_batch

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, "capacity must be a positive int, got capacity=0"),
        ({"capacity": -3}, "capacity must be a positive int, got capacity=-3"),
        ({"capacity": 2.5}, "capacity must be a positive int, got capacity=2.5"),
        ({"capacity": True}, "capacity must be a positive int, got capacity=True"),
        ({"storage": "disk"}, "storage must be one of ('memory', 'shared', 'memmap'), got storage='disk'"),
        ({"storage": "memmap"}, "storage='memmap' needs a folder: pass path=..."),
        ({"path": "/tmp/x"}, "path is only used with storage='memmap', got storage='memory'"),
        (
            {"sampler": "random"},
            "sampler must be one of ('uniform', 'prioritized', 'slice'), got sampler='random'",
        ),
        ({"sampler": "slice"}, "sampler='slice' needs slice_len (the number of frames per slice)"),
        (
            {"sampler": "slice", "slice_len": 0},
            "slice_len must be an int in [1, capacity=10], got slice_len=0",
        ),
        (
            {"sampler": "slice", "slice_len": 11},
            "slice_len must be an int in [1, capacity=10], got slice_len=11",
        ),
        (
            {"sampler": "slice", "slice_len": 4, "batch_size": 10},
            "batch_size must be a multiple of slice_len=4, got batch_size=10",
        ),
        ({"slice_len": 4}, "slice_len is only used with sampler='slice', got sampler='uniform'"),
        ({"batch_size": 0}, "batch_size must be a positive int or None, got batch_size=0"),
        ({"alpha": -0.1}, "alpha must be a number >= 0, got alpha=-0.1"),
        ({"beta": float("nan")}, "beta must be a number >= 0, got beta=nan"),
        ({"eps": "small"}, "eps must be a number >= 0, got eps='small'"),
        ({"seed": 1.5}, "seed must be an int or None, got seed=1.5"),
    ],
)
def test_bad_argument_is_named_with_value_and_allowed(kwargs: dict[str, Any], message: str) -> None:
    kwargs = {"capacity": 10, **kwargs}
    with pytest.raises(ValueError) as info:
        ReplayBuffer(**kwargs)
    assert str(info.value) == message


def test_memmap_path_must_be_a_folder(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(ValueError, match="path='.*file' is a file; a memmap replay buffer needs a folder"):
        ReplayBuffer(10, storage="memmap", path=file)


def test_memmap_folder_of_another_capacity_is_refused(tmp_path: Path) -> None:
    ReplayBuffer(10, storage="memmap", path=tmp_path)
    with pytest.raises(ValueError, match="holds a replay buffer of capacity 10, got capacity=20"):
        ReplayBuffer(20, storage="memmap", path=tmp_path)


def test_sample_size_must_fit_slices() -> None:
    rb = ReplayBuffer(10, sampler="slice", slice_len=3)
    rb.extend(make_batch(0, 1, 0, 5))
    with pytest.raises(ValueError, match="batch_size must be a multiple of slice_len=3, got batch_size=4"):
        rb.sample(4)


def test_update_priority_arguments() -> None:
    rb = ReplayBuffer(10, sampler="prioritized", eps=0.0)
    rb.extend(make_batch(0, 1, 0, 5))
    with pytest.raises(ValueError, match="got 3 priorities for 2 indices"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=r"indices must be slots in \[0, 10\), got values in \[0, 10\]"):
        rb.update_priority(torch.tensor([0, 10]), 1.0)
    with pytest.raises(ValueError, match="priorities must be finite and >= 0"):
        rb.update_priority(torch.tensor([0]), torch.tensor([-1.0]))
    with pytest.raises(ValueError, match="priorities must be finite and >= 0"):
        rb.update_priority(torch.tensor([0]), torch.tensor([float("inf")]))
    with pytest.raises(ValueError, match="a priority of 0 with eps=0.0 can never be drawn"):
        rb.update_priority(torch.tensor([0]), 0.0)


def test_impossible_slices_fail_with_a_reason() -> None:
    rb = ReplayBuffer(100, sampler="slice", slice_len=4)
    rb.extend(make_batch(0, 2, 0, 6, done_every=2))  # episodes of 2 frames
    with pytest.raises(RuntimeError, match="no valid slice of slice_len=4 among the 12 stored frames"):
        rb.sample(8)


def test_a_shared_buffer_without_layout_cannot_be_sent() -> None:
    import pickle

    rb = ReplayBuffer(10, storage="shared")
    with pytest.raises(RuntimeError, match=r"must be laid out before .* call buffer.init\(example_batch\)"):
        pickle.dumps(rb)


def test_loads_refuses_another_kind_of_buffer(tmp_path: Path) -> None:
    rb = ReplayBuffer(10, sampler="prioritized")
    rb.extend(make_batch(0, 1, 0, 3))
    rb.dumps(tmp_path)
    with pytest.raises(ValueError, match="with sampler='prioritized', this one has sampler='uniform'"):
        ReplayBuffer(10).loads(tmp_path)
    with pytest.raises(ValueError, match="holds a buffer with capacity=10, this one has capacity=11"):
        ReplayBuffer(11, sampler="prioritized").loads(tmp_path)
    with pytest.raises(FileNotFoundError, match="holds no dumped replay buffer"):
        ReplayBuffer(10).loads(tmp_path / "nothing")


@pytest.mark.parametrize("storage", ["memory", "shared"])
def test_a_capacity_no_memory_holds_is_named_with_its_bytes(storage: str) -> None:
    buffer = ReplayBuffer(2**40, storage=storage)  # a trillion frames of one float
    words = r"capacity=1099511627776 needs 28.0 TiB(, more than| of shared memory)"
    with pytest.raises((ValueError, MemoryError), match=words):
        buffer.extend(TensorDict({"x": torch.zeros(2)}, [2]))  # 4 bytes a frame, and 24 of bookkeeping
    assert len(buffer) == 0
