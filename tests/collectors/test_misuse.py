"""Misuse is refused, not half-done: pickling or copying a collector, two threads iterating it at
once, iterating while start() collects, a forked child using its parent's workers. A state taken
from another thread is the state between two batches, and the collector goes on."""

from __future__ import annotations

import copy
import functools
import os
import pickle
import threading
import time
from typing import Any

import pytest
import torch

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, ReplayBuffer
from tests.envs_for_tests import CountingEnv, TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)

slow_env = functools.partial(CountingEnv, step_sleep=0.01)


def build(kind: str, make: Any = make_cartpole, **extra: Any) -> Any:
    common: dict[str, Any] = {"frames_per_batch": 16, "seed": 0, **extra}
    if kind == "Collector":
        return Collector(make, TiltPolicy() if make is make_cartpole else None, num_envs=2, **common)
    if kind == "AsyncBatchedCollector":
        return AsyncBatchedCollector(make, TiltPolicy(), num_envs=2, **common)
    cls = MultiSyncCollector if kind == "MultiSyncCollector" else MultiAsyncCollector
    return cls([make, make], TiltPolicy() if make is make_cartpole else None, **common)


KINDS = ["Collector", "MultiSyncCollector", "MultiAsyncCollector", "AsyncBatchedCollector"]


@pytest.mark.parametrize("kind", KINDS)
def test_pickling_or_copying_a_collector_says_what_to_do_instead(kind: str) -> None:
    with build(kind) as collector:
        for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=f"a {kind} cannot be pickled or copied: .* state_dict"):
                attempt(collector)
        assert collector.next() is not None  # untouched


def test_two_threads_iterating_at_once_are_refused() -> None:
    with build("Collector", slow_env) as collector:
        errors: list[BaseException] = []
        started = threading.Event()

        def read() -> None:
            started.set()
            collector.next()  # 8 steps of 10 ms: the other thread comes in meanwhile

        reader = threading.Thread(target=read)
        reader.start()
        started.wait()
        time.sleep(0.03)
        try:
            collector.next()
        except RuntimeError as error:
            errors.append(error)
        reader.join()
        assert len(errors) == 1 and "another thread is iterating this collector" in str(errors[0])
        assert collector.next()["observation"].shape == (2, 8, 2)  # and it goes on


def test_iterating_while_start_collects_is_refused() -> None:
    buffer = ReplayBuffer(10_000)
    collector = Collector(make_cartpole, TiltPolicy(), num_envs=2, frames_per_batch=16, replay_buffer=buffer)
    try:
        collector.start()
        with pytest.raises(RuntimeError, match=r"collects in the background \(start\(\)\).*async_shutdown"):
            next(iter(collector))
    finally:
        collector.async_shutdown()
    assert len(buffer) > 0


@pytest.mark.parametrize("kind", ["Collector", "MultiSyncCollector"])
def test_a_state_from_another_thread_is_taken_between_batches(kind: str) -> None:
    with build(kind, slow_env) as collector:
        states: list[dict[str, Any]] = []
        done = threading.Event()

        def keep_reading() -> None:
            while not done.is_set():
                collector.next()

        reader = threading.Thread(target=keep_reading)
        reader.start()
        try:
            for _ in range(3):
                time.sleep(0.05)
                states.append(collector.state_dict())
        finally:
            done.set()
            reader.join()
        assert collector.next() is not None  # the pool goes on
    for state in states:  # each between two batches: a whole number of them
        frames = state["rollout"]["frames"] if kind == "Collector" else state["frames"]
        assert frames % 16 == 0


@pytest.mark.parametrize("kind", ["MultiSyncCollector", "MultiAsyncCollector"])
def test_a_forked_child_cannot_use_its_parents_workers(kind: str) -> None:
    with build(kind) as collector, build(kind) as reference:
        ours, theirs = by_worker(collector, kind, 1), by_worker(reference, kind, 1)  # before the fork
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: every use refused, and its exit leaves the workers alone
            outcome = b"ok"
            for use in (collector.next, lambda: collector.update_policy_weights_(TiltPolicy())):
                try:
                    use()
                    outcome = b"used"
                except RuntimeError as error:
                    if "is a fork of it" not in str(error):
                        outcome = str(error).encode()[:200]
            collector.shutdown()
            os.write(write, outcome)
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        assert os.read(read, 1000) == b"ok" and status == 0
        os.close(read)
        # the parent's stream lost nothing: its batches are the untouched collector's (an
        # asynchronous one's workers interleave as they come: compared worker by worker, ids
        # strided by worker, each worker's first 3 batches, 2 or more of them after the fork)
        ours, theirs = by_worker(collector, kind, 3, ours), by_worker(reference, kind, 3, theirs)
    for w in ours:
        for a, b in zip(ours[w], theirs[w], strict=False):  # each worker's first 3 or more
            assert torch.equal(a["observation"], b["observation"])
            assert torch.equal(a["collector", "traj_ids"], b["collector", "traj_ids"])


def by_worker(collector: Any, kind: str, each: int,
              found: dict[int, list[Any]] | None = None) -> dict[int, list[Any]]:
    """``found`` and the next batches, by worker, until each worker has ``each`` or more (a
    synchronous batch is both workers': worker 0); none is dropped."""
    if found is None:
        found = {0: []} if kind == "MultiSyncCollector" else {0: [], 1: []}
    for _ in range(30):
        if all(len(batches) >= each for batches in found.values()):
            return found
        batch = collector.next().clone()
        worker = 0 if kind == "MultiSyncCollector" else int(batch["collector", "traj_ids"].flatten()[0]) % 2
        found[worker].append(batch)
    raise AssertionError(f"no {each} batches of each worker in 30: {[len(b) for b in found.values()]}")


class HangsAfterThreeCalls(torch.nn.Module):
    """Pushes left three times, then never returns (a policy that hangs in the server)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 3:
            time.sleep(3600)
        return torch.zeros(obs.shape[0], dtype=torch.int64)


def test_a_policy_that_hangs_in_the_server_is_a_timeout_not_a_hang() -> None:
    collector = AsyncBatchedCollector(make_cartpole, HangsAfterThreeCalls(), num_envs=2, frames_per_batch=16,
                                      timeout=3.0, max_worker_restarts=0)
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"forward pass has run .* while timeout=3.0 s: the policy's call"):
        for _ in collector:
            pass
    assert time.monotonic() - began < 30
    collector.shutdown()


@pytest.mark.parametrize("kind", KINDS)
def test_next_after_shutdown_raises_in_every_collector(kind: str) -> None:
    """An endless collector shut down after a batch: its next() is an error saying so, never the
    None of a finished collector (the reference's behaviour)."""
    collector = build(kind)
    assert collector.next() is not None
    collector.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        collector.next()
