"""``policy_factory`` without ``policy``: the factory runs in the worker processes only (worker 0
builds the probe the slots are laid out from), once per worker, and the batches are those of the
same policy given as ``policy``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import MultiAsyncCollector, MultiSyncCollector
from tests.envs_for_tests import TiltPolicy

pytestmark = pytest.mark.timeout(120)

CLASSES = [MultiSyncCollector, MultiAsyncCollector]


class CountingFactory:
    """Builds :class:`TiltPolicy`, recording the pid of each call in a manager's list."""

    def __init__(self, pids: Any, fail: bool = False) -> None:
        self.pids, self.fail = pids, fail

    def __call__(self) -> torch.nn.Module:
        self.pids.append(os.getpid())
        if self.fail:
            raise RuntimeError("this factory cannot build its policy")
        return TiltPolicy()


@pytest.fixture(scope="module")
def manager() -> Any:
    with multiprocessing.Manager() as manager:
        yield manager


def collect(collector: Any) -> list[TensorDictBase]:
    try:
        return [batch.clone() for batch in collector]
    finally:
        collector.shutdown()


@pytest.mark.parametrize("cls", CLASSES)
def test_factory_runs_once_in_each_worker_and_never_here(cls: Any, manager: Any) -> None:
    pids = manager.list()
    collector = cls("CartPole-v1", policy_factory=CountingFactory(pids), num_workers=2,
                    frames_per_batch=20, total_frames=80, seed=3)
    assert list(pids) != [] and os.getpid() not in pids  # worker 0 built the probe at construction
    batches = collect(collector)
    assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids
    assert sum(batch.numel() for batch in batches) == 80
    # the same frames as the same policy given here (copied to the workers)
    reference = collect(cls("CartPole-v1", TiltPolicy(), num_workers=2, frames_per_batch=20, total_frames=80,
                            seed=3))
    for ours, theirs in zip(by_worker(batches), by_worker(reference), strict=True):
        steps = min(ours.shape[-1], theirs.shape[-1])  # asynchronous workers deliver in any order
        ours, theirs = ours[..., :steps], theirs[..., :steps]
        assert steps >= 20
        assert sorted(ours.keys(True, True), key=str) == sorted(theirs.keys(True, True), key=str)
        for key in theirs.keys(True, True):
            torch.testing.assert_close(ours[key], theirs[key], msg=lambda m, key=key: f"{key}: {m}")


def by_worker(batches: list[TensorDictBase]) -> list[TensorDictBase]:
    """Each worker's frames in the order it stepped them (its envs' rows, ``[envs, T]``); workers
    stride their trajectory ids by their index."""
    rows = [batch[env] for batch in batches for env in range(batch.shape[0])]
    workers = [[row for row in rows if int(row["collector", "traj_ids"][0]) % 2 == w] for w in (0, 1)]
    return [torch.cat(frames, -1) for frames in workers]


def test_per_worker_factories_run_in_their_workers(manager: Any) -> None:
    pids = manager.list()
    factories = [CountingFactory(pids), CountingFactory(pids)]
    collector = MultiSyncCollector("CartPole-v1", policy_factory=factories, num_workers=2,
                                   frames_per_batch=20, total_frames=40, seed=0)
    batches = collect(collector)
    assert len(batches) == 2 and len(pids) == 2 and os.getpid() not in pids


@pytest.mark.parametrize("cls", CLASSES)
def test_a_failing_factory_fails_the_construction_and_leaves_no_worker(cls: Any, manager: Any) -> None:
    before = {p.pid for p in multiprocessing.active_children()}
    with pytest.raises(RuntimeError, match="this factory cannot build its policy"):
        cls("CartPole-v1", policy_factory=CountingFactory(manager.list(), fail=True), num_workers=2,
            frames_per_batch=20, total_frames=40)
    assert {p.pid for p in multiprocessing.active_children()} <= before


def test_a_policy_that_does_not_fit_is_refused_at_construction(manager: Any) -> None:
    with pytest.raises(ValueError, match="does not fit action space Discrete"):
        MultiSyncCollector("CartPole-v1", policy_factory=lambda: torch.nn.Linear(4, 2), num_workers=2,
                           frames_per_batch=20, total_frames=40)


def test_the_workers_end_with_a_collector_that_never_started(manager: Any) -> None:
    """Worker 0 (its probe built) and worker 1 (started meanwhile, waiting for its setup) run from
    the construction; a shutdown before the first batch ends both."""
    before = {p.pid for p in multiprocessing.active_children()}
    pids = manager.list()
    collector = MultiSyncCollector("CartPole-v1", policy_factory=CountingFactory(pids), num_workers=2,
                                   frames_per_batch=20, total_frames=40)
    started = {p.pid for p in multiprocessing.active_children()} - before
    assert len(pids) == 1 and pids[0] in started and len(started) == 2
    collector.shutdown(timeout=5.0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and started & {p.pid for p in multiprocessing.active_children()}:
        time.sleep(0.05)
    assert not started & {p.pid for p in multiprocessing.active_children()}


def test_worker_0_killed_after_its_probe_is_restarted(manager: Any) -> None:
    """Worker 0 built the probe, collected, then died: its replacement builds its own policy (a
    normal start) and the run delivers every frame."""
    pids = manager.list()
    collector = MultiSyncCollector("CartPole-v1", policy_factory=CountingFactory(pids), num_workers=2,
                                   frames_per_batch=20, total_frames=80, seed=0)
    try:
        stream = iter(collector)
        frames = next(stream).numel()
        first = collector.worker_pids[0]
        assert first is not None and first == pids[0]
        os.kill(first, signal.SIGKILL)
        with pytest.warns(RuntimeWarning, match=r"worker 0 failed \(process exited with code -9\)"):
            frames += sum(batch.numel() for batch in stream)
        assert frames == 80 and collector.stats().restarts == 1
        assert len(pids) == 3 and os.getpid() not in pids
    finally:
        collector.shutdown()


def test_worker_init_fn_runs_once_in_worker_0(manager: Any) -> None:
    calls = manager.list()
    collector = MultiSyncCollector("CartPole-v1", policy_factory=CountingFactory(manager.list()),
                                   num_workers=2, frames_per_batch=20, total_frames=40,
                                   worker_init_fn=_Record(calls))
    collect(collector)
    assert sorted(calls) == [0, 1]


class _Record:
    def __init__(self, calls: Any) -> None:
        self.calls = calls

    def __call__(self, worker: int) -> None:
        self.calls.append(worker)


class Unseeded(torch.nn.Module):
    """A policy whose every build draws new weights."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(obs).argmax(-1)


def test_every_worker_starts_from_worker_0s_weights() -> None:
    with MultiSyncCollector("CartPole-v1", policy_factory=Unseeded, num_workers=2, frames_per_batch=20,
                            total_frames=20) as collector:
        batches = list(collector)
        policies = collector.call_workers("policy")
    assert len(batches) == 1 and len(policies) == 2
    first, second = (dict(policy.state_dict()) for policy in policies)
    assert sorted(first) == ["linear.bias", "linear.weight"]
    for key in first:
        torch.testing.assert_close(first[key], second[key])
    assert (batches[0]["policy_version"] == 0).all()


def test_workers_that_run_processes_of_their_own_build_the_probe(manager: Any) -> None:
    """collector_class=MultiSyncCollector: worker 0 builds the probe (its first process's envs),
    closes it when its setup comes and starts its processes; the factory never runs here, and
    the frames are those of the same policy given here."""
    pids = manager.list()
    nested = {"collector_class": MultiSyncCollector, "collector_kwargs": {"num_workers": 2},
              "num_workers": 2, "frames_per_batch": 40, "total_frames": 80, "seed": 7}
    collector = MultiSyncCollector("CartPole-v1", policy_factory=CountingFactory(pids), **nested)
    assert len(pids) == 1 and os.getpid() not in pids  # worker 0's probe, at construction
    batches = collect(collector)
    assert os.getpid() not in pids and len(set(pids)) >= 4  # every inner process built its own
    reference = collect(MultiSyncCollector("CartPole-v1", TiltPolicy(), **nested))
    assert [b.batch_size for b in batches] == [b.batch_size for b in reference] == [(4, 10)] * 2
    for ours, theirs in zip(batches, reference, strict=True):
        for key in theirs.keys(True, True):
            torch.testing.assert_close(ours[key], theirs[key], msg=lambda m, key=key: f"{key}: {m}")
