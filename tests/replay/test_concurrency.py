"""Several processes extending shared and memmap buffers while this process samples them.

Two spawned writers each write ``NUM_BATCHES`` batches ``[2 envs, 16 steps]`` into buffers large
enough to keep them all ("big") and into buffers that keep 64 frames ("small", overwritten all the
time), then go on writing the small ones until the test has sampled all of them ``SAMPLES`` times. Every
field of a frame holds the frame's code (see ``frames_for_tests``), so a torn frame is caught. One
shared and one memmap buffer of each size share the two writer processes (spawning costs seconds).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from pathlib import Path

import pytest
import torch

from rlcollect.replay import ReplayBuffer
from tests.replay.frames_for_tests import NUM_ENVS, OBS_SIZE, STEPS, make_batch, torn_rows, write_concurrently

pytestmark = pytest.mark.timeout(120)

NUM_BATCHES = 40
WRITERS = (1, 2)
TOTAL = len(WRITERS) * NUM_BATCHES * NUM_ENVS * STEPS
SAMPLES = 400  # samples taken while the writers write


def make_buffer(storage: str, capacity: int, path: Path) -> ReplayBuffer:
    rb = ReplayBuffer(capacity, storage=storage, path=path if storage == "memmap" else None, seed=0)
    rb.init(make_batch(0, NUM_ENVS, 0, STEPS, OBS_SIZE))  # laid out here, before the workers get it
    return rb


def check_every_frame_once_and_contiguous(big: ReplayBuffer) -> None:
    assert (len(big), big.write_count) == (TOTAL, TOTAL)
    stored = big.data[:TOTAL]
    assert not bool(torn_rows(stored).any())
    codes = stored["action"]
    batches = {
        (w, b): make_batch(w, NUM_ENVS, b * STEPS, STEPS)["action"].reshape(-1)
        for w in WRITERS
        for b in range(NUM_BATCHES)
    }
    expected = torch.cat(list(batches.values()))
    assert torch.equal(codes.sort().values, expected.sort().values), "a frame is missing or repeated"
    slot_of = {int(c): i for i, c in enumerate(codes)}
    for batch_codes in batches.values():  # env-major, in time order, in consecutive slots
        first = slot_of[int(batch_codes[0])]
        assert torch.equal(codes[first : first + len(batch_codes)], batch_codes)


def test_concurrent_writers_and_a_sampling_reader(tmp_path: Path) -> None:
    size = TOTAL + 100
    bigs = [make_buffer("shared", size, tmp_path), make_buffer("memmap", size, tmp_path / "big")]
    smalls = [make_buffer("shared", 64, tmp_path), make_buffer("memmap", 64, tmp_path / "small")]
    context = mp.get_context("forkserver")  # fresh processes, preloaded (tests/conftest.py)
    stop = context.Event()
    writers = [
        context.Process(target=write_concurrently, args=(bigs, smalls, w, NUM_BATCHES, stop)) for w in WRITERS
    ]
    for process in writers:
        process.start()
    samples = 0
    try:
        while any(p.is_alive() for p in writers):
            if any(len(rb) == 0 for rb in bigs + smalls):  # writers still starting: leave them the CPUs
                time.sleep(0.05)
                continue
            for rb in bigs + smalls:
                sample = rb.sample(32)
                assert not bool(torn_rows(sample).any()), f"torn frame in a sample: {sample['action']}"
                samples += 1
            if samples >= SAMPLES and all(big.write_count == TOTAL for big in bigs):
                stop.set()  # the writers go on writing the small buffers until then
    finally:
        stop.set()
        for process in writers:
            process.join(30)
    assert [p.exitcode for p in writers] == [0, 0]
    for big in bigs:
        check_every_frame_once_and_contiguous(big)
    for small in smalls:
        assert small.write_count > TOTAL
        assert not bool(torn_rows(small.data).any())


def test_a_writer_thread_and_a_sampling_thread_on_a_memory_buffer() -> None:
    rb = ReplayBuffer(64, seed=0)
    stop = threading.Event()

    def write() -> None:
        b = 0
        while not stop.is_set():
            rb.extend(make_batch(1, NUM_ENVS, b * STEPS, STEPS, OBS_SIZE))
            b += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            if len(rb):
                assert not bool(torn_rows(rb.sample(32)).any())
    finally:
        stop.set()
        writer.join(10)
    assert rb.write_count > 64
