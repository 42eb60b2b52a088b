"""``worker_init_fn`` in every collector with workers: called with its index first thing in each
worker process (before its envs are built), once per start and again at a restart; checked once."""

from __future__ import annotations

import functools
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from rlcollect import AsyncBatchedCollector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from tests.envs_for_tests import CountingEnv

pytestmark = pytest.mark.timeout(120)


def mark(folder: Path, worker_idx: int) -> None:
    """The worker init under test: one file per call, named by process, holding the index."""
    (folder / f"{os.getpid()}-{len(list(folder.iterdir()))}").write_text(str(worker_idx))


def env_after_init(folder: Path) -> CountingEnv:
    """Refuses to be built in a worker process whose init has not run (the parent's probe: allowed)."""
    if multiprocessing.parent_process() is not None and not list(folder.glob(f"{os.getpid()}-*")):
        raise RuntimeError("the env was built before worker_init_fn ran")
    return CountingEnv(episode_length=5)


def constant(obs: Any) -> Any:
    return obs[..., 0].long() * 0


def build(kind: type, folder: Path, **arguments: Any) -> Any:
    make_env = functools.partial(env_after_init, folder)
    init = functools.partial(mark, folder)
    if kind is AsyncBatchedCollector:
        return AsyncBatchedCollector([make_env, make_env], constant, envs_per_worker=1, frames_per_batch=4,
                                     total_frames=16, worker_init_fn=init, **arguments)
    if kind is RayCollector:  # each actor is a worker: its collector's options carry the init
        return RayCollector(make_env, constant, num_collectors=2, frames_per_batch=8, total_frames=16,
                            collector_kwargs={"worker_init_fn": init}, **arguments)
    return kind(make_env, constant, num_workers=2, frames_per_batch=8 if kind is MultiSyncCollector else 4,
                total_frames=16, worker_init_fn=init, **arguments)


def calls(folder: Path) -> list[tuple[int, int]]:
    """``(pid, worker index)`` of each call, in call order per process."""
    return sorted((int(path.name.split("-")[0]), int(path.read_text())) for path in folder.iterdir())


@pytest.mark.parametrize("kind", [MultiSyncCollector, MultiAsyncCollector, AsyncBatchedCollector,
                                  pytest.param(RayCollector, marks=pytest.mark.ray)])
def test_each_worker_is_initialised_once_before_its_envs(kind: type, tmp_path: Path, request: Any) -> None:
    if kind is RayCollector:
        request.getfixturevalue("ray_session")
    with build(kind, tmp_path) as collector:
        frames = sum(batch.numel() for batch in collector)
        pids = collector.worker_pids if kind is not RayCollector else collector.actor_pids
    assert frames == 16
    done = calls(tmp_path)
    assert sorted(index for _, index in done) == [0, 1]  # once in each worker, with its index
    assert {pid for pid, _ in done} == set(pids)  # in the worker processes, not here
    assert os.getpid() not in pids


@pytest.mark.filterwarnings("ignore:rlcollect worker 1 failed:RuntimeWarning")
def test_a_restarted_worker_is_initialised_again(tmp_path: Path) -> None:
    # no frame budget: worker 0 alone may deliver many batches before the restart is seen
    make_env = functools.partial(env_after_init, tmp_path)
    with MultiAsyncCollector(make_env, constant, num_workers=2, frames_per_batch=4, total_frames=-1,
                             worker_init_fn=functools.partial(mark, tmp_path),
                             max_worker_restarts=1) as collector:
        iterator = iter(collector)
        next(iterator)
        victim = collector.worker_pids[1]
        assert victim is not None
        os.kill(victim, 9)
        for _ in range(100_000):  # until the restart is seen and the new worker ran its init
            if collector.stats().restarts and len(list(tmp_path.iterdir())) == 3:
                break
            next(iterator)
    indices = sorted(index for _, index in calls(tmp_path))
    assert indices == [0, 1, 1]


def failing_init(worker_idx: int) -> None:
    raise ValueError(f"no simulator for worker {worker_idx}")


def test_what_the_init_raises_is_the_collectors_error(tmp_path: Path) -> None:
    make_env = functools.partial(env_after_init, tmp_path)
    collector = MultiSyncCollector(make_env, constant, num_workers=2, frames_per_batch=8,
                                   worker_init_fn=failing_init, max_worker_restarts=0)
    with collector, pytest.raises(Exception, match="no simulator for worker"):
        collector.next()


def test_a_worker_init_that_is_not_callable_is_named() -> None:
    with pytest.raises(TypeError, match="worker_init_fn must be callable or None, got int 3"):
        MultiSyncCollector("CartPole-v1", num_workers=2, frames_per_batch=8, worker_init_fn=3)
