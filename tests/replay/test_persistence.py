"""What outlives a buffer: state_dict, dumps/loads, and memmap folders reopened after their writer exited."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rlcollect.replay import ReplayBuffer
from tests.replay.frames_for_tests import make_batch, write_memmap_and_exit

pytestmark = pytest.mark.timeout(90)

SAMPLERS = [("uniform", {}), ("prioritized", {}), ("slice", {"slice_len": 2})]


def filled(sampler: str, extra: dict[str, int], **kwargs: object) -> ReplayBuffer:
    rb = ReplayBuffer(16, sampler=sampler, batch_size=4, seed=0, **extra, **kwargs)  # type: ignore[arg-type]
    for b in range(3):
        rb.extend(make_batch(0, 2, b * 4, 4, done_every=3))  # 24 frames: wrapped round
    if sampler == "prioritized":
        rb.update_priority(torch.tensor([0, 5, 9]), torch.tensor([3.0, 0.5, 7.0]))
    rb.sample()  # advance the generator
    return rb


def assert_same(a: ReplayBuffer, b: ReplayBuffer) -> None:
    assert (len(a), a.write_count, a.cursor) == (len(b), b.write_count, b.cursor)
    assert (a.data == b.data).all()
    for _ in range(3):  # same generator state and priorities: same samples, weights included
        assert (a.sample() == b.sample()).all()


@pytest.mark.parametrize(("sampler", "extra"), SAMPLERS)
def test_state_dict_round_trip(sampler: str, extra: dict[str, int]) -> None:
    rb = filled(sampler, extra)
    state = rb.state_dict()
    copy = ReplayBuffer(16, sampler=sampler, batch_size=4, **extra)  # type: ignore[arg-type]
    copy.load_state_dict(state)
    assert_same(rb, copy)


def test_state_dict_is_a_snapshot() -> None:
    rb = filled("uniform", {})
    state = rb.state_dict()
    rb.extend(make_batch(1, 1, 0, 16))
    copy = ReplayBuffer(16)
    copy.load_state_dict(state)
    assert copy.write_count == 24
    assert not bool((copy.data["action"] >= 100_000).any())


def test_state_dict_survives_torch_save(tmp_path: Path) -> None:
    rb = filled("prioritized", {})
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    copy = ReplayBuffer(16, sampler="prioritized", batch_size=4)
    copy.load_state_dict(torch.load(tmp_path / "rb.pt"))
    assert_same(rb, copy)


@pytest.mark.parametrize(("sampler", "extra"), SAMPLERS)
@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_dumps_loads_round_trip(tmp_path: Path, sampler: str, extra: dict[str, int], storage: str) -> None:
    path = tmp_path / "own" if storage == "memmap" else None
    rb = filled(sampler, extra, storage=storage, path=path)
    rb.dumps(tmp_path / "dump")
    copy = ReplayBuffer(16, sampler=sampler, **extra)  # type: ignore[arg-type]
    copy.loads(tmp_path / "dump")
    assert copy.batch_size == 4  # restored, as TorchRL does
    assert_same(rb, copy)
    rb.dumps(tmp_path / "dump")  # dumping again over an earlier dump replaces it
    assert TensorDict.load_memmap(tmp_path / "dump" / "storage" / "data").batch_size == torch.Size([16])


def test_memmap_reopened_after_the_writing_process_exited(tmp_path: Path) -> None:
    process = mp.get_context("forkserver").Process(target=write_memmap_and_exit, args=(str(tmp_path), 12, 3))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    # what the child wrote: 3 batches [2 envs, 5 steps] = 30 frames in 12 slots
    expected = ReplayBuffer(12)
    for b in range(3):
        expected.extend(make_batch(7, 2, b * 5, 5, done_every=3))
    reopened = ReplayBuffer(12, storage="memmap", path=tmp_path, sampler="slice", slice_len=2)
    assert (len(reopened), reopened.write_count, reopened.cursor) == (12, 30, 6)
    assert (reopened.data == expected.data).all()
    sample = reopened.sample(4)
    assert torch.equal(sample["action"], reopened.data["action"][sample["index"]])
    reopened.extend(make_batch(8, 1, 0, 1))  # and it goes on writing at its cursor
    assert int(ReplayBuffer(12, storage="memmap", path=tmp_path).data["action"][6]) == 800_000



def test_a_memmap_folder_of_format_1_is_upgraded_in_place(tmp_path: Path) -> None:
    rb = ReplayBuffer(4, storage="memmap", path=tmp_path)
    rb.extend(TensorDict({"x": torch.arange(6.0)}, batch_size=[6]))
    del rb
    # as rlcollect wrote it before commits were counted apart: one counter (reserved = committed)
    (tmp_path / "count.memmap").write_bytes(torch.tensor([6]).numpy().tobytes())
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "version": 1}))
    reopened = ReplayBuffer(4, storage="memmap", path=tmp_path)
    assert (len(reopened), reopened.write_count, reopened.cursor) == (4, 6, 2)
    assert reopened.data["x"].tolist() == [4.0, 5.0, 2.0, 3.0]
    assert json.loads((tmp_path / "meta.json").read_text())["version"] == 2
