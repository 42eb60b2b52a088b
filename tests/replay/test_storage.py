"""Storage bookkeeping: commit stamps, and a write that meets slots another writer still holds.

These tests reach into the storage's stamp and reservation tensors to stage the situations that two
processes produce only by chance (see the scheme in ``rlcollect/replay/storage.py``).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest
import torch
from tensordict import TensorDict

from rlcollect.replay.storage import MemoryStorage

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
