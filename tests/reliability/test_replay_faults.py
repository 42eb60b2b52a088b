"""Replay buffers shared by processes that die: killed mid-write, killed holding the lock, and cleanup.

A writer SIGKILLed at any point must not wedge the buffer (no 60 s wait: the lock is one the kernel
releases), must not leave its unfinished frames readable or counted, and its slots must be reused by
later writers. A ``"shared"`` buffer's lock is an empty file in ``/dev/shm``, removed by the process
that created it when the buffer is closed, collected or the process exits; no semaphore is used.
Children are spawned (about 2 s each, importing torch), except in the fork test.
"""

from __future__ import annotations

import fcntl
import gc
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rlcollect.replay import ReplayBuffer
from rlcollect.replay._locks import LOCK_FILE_PREFIX
from tests.replay.frames_for_tests import (
    die_holding_the_lock,
    die_inside_a_write,
    extend_and_own_a_buffer,
    extend_and_signal,
    flat_frames,
    own_a_buffer_and_die,
    torn_rows,
)

pytestmark = pytest.mark.timeout(60)

SHM = Path("/dev/shm")
STORAGES = ["shared", "memmap"]


def codes(writer: int, steps: int = 8) -> set[int]:
    return {writer * 100_000 + step for step in range(steps)}


def make_buffer(storage: str, tmp_path: Path, capacity: int = 16) -> ReplayBuffer:
    path = tmp_path / "rb" if storage == "memmap" else None
    rb = ReplayBuffer(capacity, storage=storage, path=path, seed=0)
    rb.init(flat_frames(0))
    return rb


def kill_when(target: Callable[..., None], rb: ReplayBuffer, check: Callable[[], Any] = lambda: None) -> None:
    """Spawn ``target(rb, event)``, wait for the event, run ``check``, SIGKILL the child and reap it."""
    context = mp.get_context("forkserver")  # fresh processes, preloaded (tests/conftest.py)
    event = context.Event()
    child = context.Process(target=target, args=(rb, event))
    child.start()
    try:
        assert event.wait(30), "the child never reached the point where it is killed"
        check()
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    finally:
        child.join(10)
    assert child.exitcode == -signal.SIGKILL


def sampled_codes(rb: ReplayBuffer, n: int = 64) -> set[int]:
    sample = rb.sample(n)
    assert not bool(torn_rows(sample).any()), f"torn frames sampled: {sample['action']}"
    assert torch.equal(sample["action"], rb.data["action"][sample["index"]])
    return set(sample["action"].tolist())


def timed(action: Callable[[], Any]) -> float:
    start = time.monotonic()
    action()
    return time.monotonic() - start


@pytest.mark.parametrize("storage", STORAGES)
def test_a_writer_killed_inside_its_copy_leaves_only_committed_frames(storage: str, tmp_path: Path) -> None:
    rb = make_buffer(storage, tmp_path)
    kill_when(die_inside_a_write, rb)
    # writer 1's 8 frames are committed; writer 2's reached slots 8..15 only in their first field
    assert rb.data["observation"][8:, 0].tolist() == sorted(float(c) for c in codes(2))
    assert (len(rb), rb.write_count, rb.cursor) == (8, 8, 0)  # capacity 16: the cursor went round
    assert sampled_codes(rb) == codes(1)  # 64 draws among 8 frames: all of them, none of writer 2's

    assert timed(lambda: rb.extend(flat_frames(3))) < 1.0  # slots 0..7, over writer 1's frames
    assert (len(rb), rb.write_count) == (8, 16)
    assert sampled_codes(rb) == codes(3)
    assert timed(lambda: rb.extend(flat_frames(4))) < 1.0  # slots 8..15: the dead writer's, reused
    assert (len(rb), rb.write_count) == (16, 24)
    assert set(rb.data["action"].tolist()) == codes(3) | codes(4)
    assert not bool(torn_rows(rb.data).any())
    assert sampled_codes(rb, 256) == codes(3) | codes(4)
    rb.close()


@pytest.mark.parametrize("storage", STORAGES)
def test_a_writer_killed_holding_the_lock_blocks_nobody(storage: str, tmp_path: Path) -> None:
    rb = make_buffer(storage, tmp_path)
    lock_path = rb._storage._lock.path
    assert lock_path is not None

    def held_by_the_child() -> None:
        with open(lock_path) as lock_file, pytest.raises(BlockingIOError):
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)

    kill_when(die_holding_the_lock, rb, held_by_the_child)
    with open(lock_path) as lock_file:  # released by the kernel: free for anyone at once
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert timed(lambda: sampled_codes(rb)) < 1.0
    assert sampled_codes(rb) == codes(1)
    assert timed(lambda: rb.extend(flat_frames(3))) < 1.0
    assert (len(rb), rb.write_count, rb.cursor) == (16, 16, 0)
    assert sampled_codes(rb, 256) == codes(1) | codes(3)
    rb.close()


def lock_files() -> set[str]:
    return {name for name in os.listdir(SHM) if name.startswith(LOCK_FILE_PREFIX)}


def mapped_semaphores() -> set[str]:
    return {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/sem." in line}


@pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm")
def test_no_semaphore_and_no_lock_file_left_behind(tmp_path: Path) -> None:
    before, semaphores = lock_files(), mapped_semaphores()
    rb = make_buffer("shared", tmp_path)
    rb.extend(flat_frames(1))
    assert mapped_semaphores() == semaphores, "a shared buffer should use no semaphore"
    own = rb._storage._lock.path
    assert own is not None and own.parent == SHM and own.stat().st_size == 0
    assert lock_files() - before == {own.name}

    report = tmp_path / "child_lock"
    child = mp.get_context("forkserver").Process(target=extend_and_own_a_buffer, args=(rb, str(report)))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert set(rb.data["action"][:16].tolist()) == codes(1) | codes(5)  # the child wrote through its copy
    assert not Path(report.read_text()).exists(), "the child's own buffer kept its lock file after exit"
    assert own.exists(), "a child's copy must not remove the owner's lock file"

    rb.close()
    assert not own.exists()
    other = ReplayBuffer(4, storage="shared")
    other_path = other._storage._lock.path
    assert other_path is not None and other_path.exists()
    del other
    gc.collect()
    assert not other_path.exists()
    assert lock_files() - before == set()


@pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm")
def test_the_lock_file_of_a_killed_owner_is_removed_by_the_next_buffer(tmp_path: Path) -> None:
    report = tmp_path / "owner_lock"
    child = mp.get_context("forkserver").Process(target=own_a_buffer_and_die, args=(str(report),))
    child.start()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    orphan = Path(report.read_text())
    assert orphan.exists(), "SIGKILL runs no clean-up: the file is still there"
    rb = ReplayBuffer(4, storage="shared")
    assert not orphan.exists()
    rb.close()


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_child_started_any_way_locks_through_its_own_file(method: str, tmp_path: Path) -> None:
    """A forked child inherits the parent's open lock file, which ``flock`` would not tell apart from
    the parent's: it must reopen the file (and not inherit a held thread lock); a forkserver child
    unpickles the lock and opens the file."""
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    rb = make_buffer("shared", tmp_path)
    context = mp.get_context(method)
    done = context.Event()
    child = context.Process(target=extend_and_signal, args=(rb, 2, done))
    with rb._storage._lock:
        child.start()
        assert not done.wait(1.0), "the child wrote while this process held the lock"
    assert done.wait(20)
    child.join(10)
    assert child.exitcode == 0
    assert (len(rb), rb.write_count) == (8, 8)
    assert set(rb.data["action"][:8].tolist()) == codes(2)
    rb.close()
