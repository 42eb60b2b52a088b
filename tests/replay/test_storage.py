"""Storage bookkeeping: commit stamps, and a write that meets slots another writer still holds.

These tests reach into the storage's stamp and reservation tensors to stage the situations that two
processes produce only by chance (see the scheme in ``rlcollect/replay/storage.py``).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rlcollect.replay import ReplayBuffer
from rlcollect.replay._locks import Lock
from rlcollect.replay.storage import NEXT, MemoryStorage

pytestmark = pytest.mark.timeout(30)


def frames(first: int, n: int) -> TensorDict:
    return TensorDict({"code": torch.arange(first, first + n)}, batch_size=[n])


def in_flight(pid: int) -> int:
    return -(pid + 2)


def test_committed_slots_carry_their_sequence_number() -> None:
    storage = MemoryStorage(4)
    storage.extend(frames(0, 3))
    storage.extend(frames(3, 3))  # sequence numbers 3 4 5 go to slots 3 0 1
    assert storage.stamps(torch.arange(4)).tolist() == [4, 5, 2, 3]


def test_slots_held_by_a_dead_writer_are_taken_over() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    storage = MemoryStorage(4)
    storage.init(frames(0, 1))
    storage._stamp[0:2] = in_flight(dead.pid)  # it died between marking and committing
    assert storage.extend(frames(10, 4)).tolist() == [0, 1, 2, 3]
    assert storage.leaf("code").tolist() == [10, 11, 12, 13]
    assert storage.stamps(torch.arange(4)).tolist() == [0, 1, 2, 3]


def test_a_write_waits_for_a_live_writer_and_leaves_newer_claims_alone() -> None:
    storage = MemoryStorage(4)
    storage.extend(frames(0, 4))
    storage._stamp[1] = in_flight(os.getpid())  # "another writer" (this test) is writing slot 1
    done = threading.Event()
    thread = threading.Thread(target=lambda: (storage.extend(frames(10, 4)), done.set()))
    thread.start()
    time.sleep(0.2)
    assert not done.is_set(), "the write did not wait for slot 1"
    storage._reserved[0] = 99  # a newer write claimed slot 0 meanwhile
    storage._stamp[0] = 99
    storage._stamp[1] = 1  # the other writer commits
    thread.join(5)
    assert done.is_set()
    assert storage.leaf("code").tolist() == [0, 11, 12, 13]  # slot 0 is the newer writer's
    assert storage.stamps(torch.arange(4)).tolist() == [99, 5, 6, 7]


def test_counters_leave_out_a_range_whose_writer_died() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    rb = ReplayBuffer(8, seed=0)
    rb.extend(frames(0, 4))
    storage = rb._storage
    storage._count[NEXT] += 2  # a writer reserved sequence numbers 4 and 5, marked their slots, died
    storage._reserved[4:6] = torch.tensor([4, 5])
    storage._stamp[4:6] = in_flight(dead.pid)
    storage._leaves[0][4:6] = -7  # and half wrote them
    assert (len(rb), rb.write_count, rb.cursor) == (4, 4, 6)
    assert set(rb.sample(64)["code"].tolist()) == {0, 1, 2, 3}  # never the dead writer's slots
    assert rb.state_dict()["storage"]["stamps"].tolist() == [0, 1, 2, 3, -1, -1, -1, -1]
    assert rb.extend(frames(10, 4)).tolist() == [6, 7, 0, 1]  # the cursor skipped the range
    assert (len(rb), rb.write_count) == (6, 8)
    assert set(rb.sample(64)["code"].tolist()) == {2, 3, 10, 11, 12, 13}
    assert rb.extend(frames(20, 4)).tolist() == [2, 3, 4, 5]  # and the next write reuses it
    assert (len(rb), rb.write_count) == (8, 12)
    assert rb.data["code"].tolist() == [12, 13, 20, 21, 22, 23, 10, 11]


def test_a_write_that_fails_in_its_copy_counts_nothing() -> None:
    storage = MemoryStorage(4)
    storage.extend(frames(0, 2))
    bad = TensorDict({"code": torch.empty(2, dtype=torch.int64, device="meta")}, batch_size=[2])
    with pytest.raises(NotImplementedError):  # a meta tensor holds no data to copy
        storage.extend(bad)
    assert (len(storage), storage.write_count, storage.reserved_count) == (2, 2, 4)
    assert storage.stamps(torch.arange(4)).tolist() == [0, 1, -1, -1]  # not left in flight
    assert storage.extend(frames(4, 2)).tolist() == [0, 1]  # goes on at the cursor: slots 2, 3 stay empty
    assert (len(storage), storage.write_count, storage.reserved_count) == (2, 4, 6)
    assert storage.stamps(torch.arange(4)).tolist() == [4, 5, -1, -1]


def test_a_lock_copy_opens_its_own_file_and_only_the_creator_removes_it() -> None:
    lock = Lock.temporary()
    assert lock.path is not None and lock.path.exists()
    copy = pickle.loads(pickle.dumps(lock))
    assert copy.path == lock.path and copy._fd not in (None, lock._fd)
    with lock, open(lock.path) as other, pytest.raises(BlockingIOError):  # another open file: excluded
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with copy:
        pass
    copy.close()
    assert lock.path.exists()
    lock.close()
    assert not lock.path.exists()
    with pytest.raises(RuntimeError, match="lock file .* is gone"):
        pickle.loads(pickle.dumps(lock))


def test_a_memmap_storage_too_big_for_its_disk_is_an_oserror_before_anything_is_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil as real_shutil

    import rlcollect.replay.memmap as memmap

    usage = real_shutil.disk_usage(tmp_path)
    monkeypatch.setattr(memmap.shutil, "disk_usage", lambda path: usage._replace(free=4096))
    buffer = ReplayBuffer(1000, storage="memmap", path=tmp_path / "rb")
    with pytest.raises(OSError, match=r"storage at .*rb needs 24,000 bytes; its disk has 4,096 free"):
        buffer.extend(frames(0, 4))
    assert not list((tmp_path / "rb").rglob("*.memmap"))  # nothing mapped


def test_a_memmap_storage_reserves_its_blocks_and_names_a_file_it_cannot_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlcollect.replay.memmap as memmap

    def full(descriptor: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(memmap.os, "posix_fallocate", full)
    buffer = ReplayBuffer(1000, storage="memmap", path=tmp_path / "rb")
    with pytest.raises(OSError, match=r"cannot reserve [0-9,]+ bytes for .*\.memmap \(No space left"):
        buffer.extend(frames(0, 4))
    monkeypatch.undo()
    buffer = ReplayBuffer(1000, storage="memmap", path=tmp_path / "rb2")
    buffer.extend(frames(0, 4))  # with room: every data file's blocks allocated, not sparse
    for path in (tmp_path / "rb2").rglob("*.memmap"):
        assert os.stat(path).st_blocks * 512 >= path.stat().st_size
