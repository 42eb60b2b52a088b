"""Run folders: batches appended as they come, next observations left out and rebuilt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rlcollect import Collector, MultiSyncCollector, load_run
from rlcollect.data.run_folder import COMMIT, FINALS, RunFolderWriter
from tests.envs_for_tests import make_dict_env, make_pendulum


def leaf_keys(td: TensorDict) -> set[tuple[str, ...]]:
    return {(k,) if isinstance(k, str) else tuple(k) for k in td.keys(True, True)}


def assert_same(stored: TensorDict, batches: list[TensorDict]) -> None:
    assert stored.batch_size == torch.Size([len(batches), *batches[0].batch_size])
    assert leaf_keys(stored) == leaf_keys(batches[0])
    for key in leaf_keys(batches[0]):
        expected = torch.stack([batch.get(key) for batch in batches])
        assert stored.get(key).dtype == expected.dtype, key
        assert torch.equal(stored.get(key), expected), key


@pytest.mark.timeout(60)
def test_the_folder_grows_one_batch_at_a_time_and_loads_between(tmp_path: Path) -> None:
    writer = RunFolderWriter(tmp_path)
    batches = []
    for i in range(3):
        batch = TensorDict({"x": torch.arange(8).reshape(2, 4) + 10 * i,
                            "next": {"y": torch.full((2, 4, 3), float(i))}}, batch_size=[2, 4])
        writer.append(batch)
        batches.append(batch)
        # loads at the size written so far, while the files are still open
        assert_same(TensorDict.load_memmap(tmp_path), batches)
        assert (tmp_path / "x.memmap").stat().st_size == (i + 1) * 8 * 8  # nothing ahead of time
        assert (tmp_path / "next" / "y.memmap").stat().st_size == (i + 1) * 24 * 4
    writer.close()
    assert_same(TensorDict.load_memmap(tmp_path), batches)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("env", "observation_keys"),
    [
        ("CartPole-v1", [("observation",)]),  # terminations
        (make_pendulum, [("observation",)]),  # truncations (200 steps), float observations
        (make_dict_env, [("pos",), ("count",)]),  # a Dict observation: one entry per leaf
    ],
    ids=["cartpole", "pendulum", "dict"],
)
def test_next_observations_left_out_are_rebuilt_value_for_value(
    tmp_path: Path, env: object, observation_keys: list[tuple[str, ...]]
) -> None:
    with Collector(env, frames_per_batch=2 * 96, total_frames=5 * 2 * 96, num_envs=2, seed=3) as collector:
        batches = [batch.clone() for batch in collector]
    assert any(batch["next", "done"].any() for batch in batches)  # episodes end inside the run
    writer = RunFolderWriter(tmp_path, next_obs=False, observation_keys=observation_keys)
    for batch in batches:
        writer.append(batch)
    writer.close()
    stored = TensorDict.load_memmap(tmp_path)
    assert not any(key[0] == "next" and key[1:] in observation_keys for key in leaf_keys(stored))
    finals = TensorDict.load_memmap(tmp_path / FINALS)
    ended = sum(int(batch["next", "done"][:, :-1].sum()) for batch in batches)
    assert finals.batch_size == torch.Size([ended + 2 * len(batches)])  # episode ends + batch ends
    assert_same(load_run(tmp_path), batches)


@pytest.mark.timeout(120)
def test_rebuilt_from_workers_batches(tmp_path: Path) -> None:
    with MultiSyncCollector("CartPole-v1", num_workers=2, num_envs_per_worker=2, frames_per_batch=128,
                            total_frames=512, seed=1) as collector:
        batches = [batch.clone() for batch in collector]
    writer = RunFolderWriter(tmp_path, next_obs=False, observation_keys=[("observation",)])
    for batch in batches:
        writer.append(batch)
    writer.close()
    assert_same(load_run(tmp_path), batches)


def test_next_obs_false_needs_the_observation_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="next_obs=False needs observation_keys"):
        RunFolderWriter(tmp_path, next_obs=False)


def counting_batch(i: int) -> TensorDict:
    return TensorDict({"x": torch.full((2, 4), i), "next": {"y": torch.full((2, 4, 3), float(i))}},
                      batch_size=[2, 4])


@pytest.mark.timeout(60)
def test_a_write_that_fails_midway_leaves_the_folder_at_its_last_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlcollect.data.run_folder as run_folder

    writer = RunFolderWriter(tmp_path)
    writer.append(counting_batch(0))
    real_write, calls = run_folder._write_at, []

    def full_disk_at_the_second_leaf(path: Path, offset: int, data: memoryview) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "no space left", str(path))
        real_write(path, offset, data)

    monkeypatch.setattr(run_folder, "_write_at", full_disk_at_the_second_leaf)
    with pytest.raises(OSError, match="no space left"):
        writer.append(counting_batch(1))
    assert_same(load_run(tmp_path), [counting_batch(0)])  # one leaf's rows were written, not committed
    assert_same(TensorDict.load_memmap(tmp_path), [counting_batch(0)])
    monkeypatch.setattr(run_folder, "_write_at", real_write)
    writer.append(counting_batch(1))  # the disk has room again: the same batch goes in its place
    assert_same(load_run(tmp_path), [counting_batch(0), counting_batch(1)])


@pytest.mark.timeout(60)
def test_load_run_reads_the_commit_whatever_the_metadata_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlcollect.data.run_folder as run_folder

    writer = RunFolderWriter(tmp_path)
    assert load_run(tmp_path).batch_size == torch.Size([0])  # committed, nothing written yet
    writer.append(counting_batch(0))
    # a kill between the commit and the metadata of batch 1: committed.json says 2, meta.json 1
    monkeypatch.setattr(run_folder._AppendingMemmap, "commit", lambda self, length: None)
    writer.append(counting_batch(1))
    assert json.loads((tmp_path / COMMIT).read_text())["batches"] == 2
    assert json.loads((tmp_path / "meta.json").read_text())["shape"][0] == 1
    assert_same(load_run(tmp_path), [counting_batch(0), counting_batch(1)])
    # the rows of a batch being written, past the commit: not read
    with (tmp_path / "x.memmap").open("ab") as file:
        file.write(bytes(64))
    assert_same(load_run(tmp_path), [counting_batch(0), counting_batch(1)])
    (tmp_path / "x.memmap").write_bytes(bytes(8))  # damaged later: too short for the commit
    with pytest.raises(ValueError, match=r"x.memmap holds 8 bytes; the 2 committed rows need 128"):
        load_run(tmp_path)


@pytest.mark.timeout(60)
def test_a_full_disk_is_an_oserror_naming_the_file_and_the_bytes() -> None:
    from rlcollect.data.run_folder import _write_at

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with pytest.raises(OSError, match=r"no space left for /dev/full: 1,024 bytes needed at offset 0"):
        _write_at(Path("/dev/full"), 0, memoryview(bytes(1024)))
