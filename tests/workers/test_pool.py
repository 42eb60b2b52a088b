"""The worker protocol and the pool, in this process: a fake transport runs real ``Worker`` objects.

What the pool owes every transport: reports in order, restarts with fresh seeds and trajectory
ids after a death, an error, or a hang (the lost batch is asked for again), the original error
past the budget, pending reports carried through a state, and a bounded shutdown.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any

import cloudpickle
import pytest
import torch

from rlcollect.data.buffers import BatchBuffers
from rlcollect.rollout.engine import Rollout, RolloutSpec
from rlcollect.weights.store import WeightStore
from rlcollect.workers.pool import WorkerPool
from rlcollect.workers.wire import unpack_into
from rlcollect.workers.worker import Worker, WorkerSetup, start_worker
from tests.envs_for_tests import CountingEnv, EnvBroke

STEPS, ENVS = 5, 2


class FakeTransport:
    """Workers as objects in this process; ``kill``, ``hang`` and ``break_next`` inject faults."""

    shared_slots = False

    def __init__(self) -> None:
        self.workers: dict[int, Worker | None] = {}
        self.answers: dict[int, list[Any]] = {}
        self.spawned: list[WorkerSetup] = []
        self.hung: set[int] = set()
        self.closed = False

    def spawn(self, worker: int, setup: WorkerSetup, timeout: float = math.inf, *,
              block: bool = True) -> None:
        self.spawned.append(setup)
        self.hung.discard(worker)
        self.workers[worker], answer = start_worker(setup)
        self.answers[worker] = [answer]

    def send(self, worker: int, message: Any) -> None:
        target = self.workers.get(worker)
        if target is not None and worker not in self.hung:
            self.answers[worker].append(target.handle(*message))

    def wait(self, workers: list[int], timeout: float) -> list[tuple[int, Any]]:
        ready = [w for w in workers if self.answers.get(w)]
        return [(ready[0], self.answers[ready[0]].pop(0))] if ready else []  # one at a time, as Ray does

    def kill(self, worker: int) -> None:
        self.answers[worker] = [("died", "killed by the test")]
        self.workers[worker] = None

    def stop(self, worker: int, grace: float) -> None:
        self.workers.pop(worker, None)

    def can_write(self, replay_buffer: Any) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def setups(env: Any = None, seed: int = 100, workers: int = 2) -> list[WorkerSetup]:
    env = env or functools.partial(CountingEnv, episode_length=3)
    spec = cloudpickle.dumps(RolloutSpec(env, num_envs=ENVS))
    store = WeightStore({}, workers)
    return [WorkerSetup(worker_idx=w, num_workers=workers, spec=spec, num_steps=STEPS, env_offset=w * ENVS,
                        seed=seed, weights=store.receiver(w)) for w in range(workers)]


def pool_of(transport: FakeTransport, **kwargs: Any) -> WorkerPool:
    options: dict[str, Any] = {"timeout": 0.2, "max_restarts": 1, "restart_seed_stride": 2 * ENVS, **kwargs}
    built = setups()
    pool = WorkerPool(transport, built.__getitem__, len(built), **options)
    pool.start()
    return pool


def observations(report: Any) -> torch.Tensor:
    """The ``[ENVS, STEPS, 2]`` observations (env uid, step count) a report carries."""
    rollout = Rollout(RolloutSpec(functools.partial(CountingEnv), num_envs=ENVS))
    target = BatchBuffers.allocate(rollout.layout, ENVS, STEPS).batch
    rollout.close()
    unpack_into(report.data, target)
    return target["observation"]


def test_reports_arrive_and_trajectory_ids_continue() -> None:
    pool = pool_of(FakeTransport())
    assert [info.num_envs for info in pool.infos] == [ENVS, ENVS]
    for worker in (0, 1):
        pool.collect(worker, (0, False, None))
    reports = pool.wait([0, 1]) + pool.wait([0, 1])
    assert sorted(w for w, _ in reports) == [0, 1] and not pool.busy()
    first = {w: observations(r) for w, r in reports}
    assert first[0][:, 0, 0].tolist() == [100.0, 101.0] and first[1][:, 0, 0].tolist() == [102.0, 103.0]
    assert first[0][0, :, 1].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert pool.next_traj_id == [r.next_traj_id for _, r in sorted(reports, key=lambda x: x[0])]


def test_a_dead_worker_is_restarted_with_fresh_seeds_and_ids_and_its_batch_asked_again() -> None:
    transport = FakeTransport()
    pool = pool_of(transport)
    pool.collect(0, (0, False, None))
    pool.wait([0])
    ids_before = pool.next_traj_id[0]
    pool.collect(0, (0, False, None))
    transport.kill(0)
    with pytest.warns(RuntimeWarning, match="worker 0 failed .*killed by the test.*restart 1 of 1"):
        (worker, report), = pool.wait([0])
    assert worker == 0 and pool.restarts == [1, 0]
    restarted = transport.spawned[-1]
    assert restarted.seed == 100 + 2 * ENVS and restarted.traj_start == ids_before
    assert observations(report)[:, 0].tolist() == [[104.0, 0.0], [105.0, 0.0]]  # fresh envs, next seeds


def test_past_the_budget_the_original_error_is_raised_with_the_worker_traceback() -> None:
    env = functools.partial(CountingEnv, fail_at=2)  # every env fails in its first batch
    transport = FakeTransport()
    built = setups(env)
    pool = WorkerPool(transport, built.__getitem__, len(built), timeout=0.2, max_restarts=1,
                      restart_seed_stride=4)
    pool.start()
    pool.collect(0, (0, False, None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(EnvBroke, match="broke at step 2") as info:
            pool.wait([0])
    assert "raised in rlcollect worker 0" in "".join(info.value.__notes__)
    assert pool.restarts[0] == 2


def test_a_hung_worker_is_restarted_after_the_timeout() -> None:
    transport = FakeTransport()
    pool = pool_of(transport, timeout=0.05)
    transport.hung.add(1)
    pool.collect(1, (0, False, None))
    with pytest.warns(RuntimeWarning, match="no answer within timeout=0.05 s"):
        (worker, _), = pool.wait([1])
    assert worker == 1 and pool.restarts == [0, 1]


def test_pending_reports_survive_a_state_and_come_first() -> None:
    pool = pool_of(FakeTransport())
    for worker in (0, 1):
        pool.collect(worker, (1, False, None))
    pool.drain()
    pending = pool.pending()
    assert sorted(w for w, _ in pending) == [0, 1] and pool.busy() == {0, 1}
    fresh = pool_of(FakeTransport())
    fresh.restore_pending(pending)
    assert fresh.busy() == {0, 1}
    got = fresh.wait([0, 1])
    assert [r for _, r in got] == [r for _, r in pending] and not fresh.busy()


def test_of_reports_that_arrived_together_the_oldest_weights_come_first() -> None:
    """A worker's batch of the weights from before an update is not held back behind another
    worker's batch of the new weights (what a learner reading ``policy_version`` expects)."""
    pool = pool_of(FakeTransport())
    for worker in (0, 1):
        pool.collect(worker, (1, False, None))
    pool.drain()
    (w0, r0), (w1, r1) = sorted(pool.pending(), key=lambda x: x[0])
    fresh = pool_of(FakeTransport())
    fresh.restore_pending([(w0, dataclasses.replace(r0, policy_version=3)),
                           (w1, dataclasses.replace(r1, policy_version=2))])
    first, second = fresh.wait_one([0, 1]), fresh.wait_one([0, 1])
    assert (first[0], first[1].policy_version) == (1, 2)
    assert (second[0], second[1].policy_version) == (0, 3) and not fresh.busy()


def test_shutdown_stops_every_worker_and_is_idempotent() -> None:
    transport = FakeTransport()
    pool = pool_of(transport)
    pool.shutdown(timeout=1.0)
    pool.shutdown(timeout=1.0)
    assert pool.closed and transport.closed and not transport.workers
    with pytest.raises(RuntimeError, match="shut down"):
        pool._restart(0, None, "after shutdown")


def test_a_worker_answers_errors_instead_of_raising() -> None:
    worker, (kind, info) = start_worker(setups(functools.partial(CountingEnv, fail_at=1))[0])
    assert kind == "ready" and worker is not None and info.num_envs == ENVS
    kind, failure = worker.handle("collect", (0, False, None))
    assert kind == "error" and failure.error_type == "EnvBroke" and "envs_for_tests.py" in failure.traceback
    assert worker.handle("dance", None)[0] == "error"


FAIL_NEXT_BUILD = [0]  # envs whose construction raises next (this process builds the fake workers)


def flaky_env(**kwargs: Any) -> CountingEnv:
    if FAIL_NEXT_BUILD[0]:
        FAIL_NEXT_BUILD[0] -= 1
        raise OSError("the replacement's env could not be built")
    return CountingEnv(episode_length=3, **kwargs)


def killed_then_replacement_fails(max_restarts: int) -> WorkerPool:
    """A pool whose worker 0 is killed mid-batch and whose replacement's env build then fails once."""
    built = setups(flaky_env)
    pool = WorkerPool(FakeTransport(), built.__getitem__, len(built), timeout=0.2, max_restarts=max_restarts,
                      restart_seed_stride=2 * ENVS)
    pool.start()
    pool.collect(0, (0, False, None))
    pool.transport.kill(0)  # type: ignore[attr-defined]
    FAIL_NEXT_BUILD[0] = 1
    return pool


def test_a_failure_while_the_replacement_starts_takes_one_more_restart() -> None:
    """Killed, then the replacement's env build fails once: two restarts of a budget of two, and
    the lost batch comes from the third process; with a budget of one, the start failure is raised
    with every cause in order and the option that bounds them."""
    pool = killed_then_replacement_fails(max_restarts=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (worker, report), = pool.wait([0])
    assert worker == 0 and pool.restarts == [2, 0]
    assert [str(w.message).split(";")[0] for w in caught] == [
        "rlcollect worker 0 failed (killed by the test)",
        "rlcollect worker 0 failed (the replacement's env could not be built)"]
    assert observations(report)[:, 0, 1].tolist() == [0.0, 0.0]  # a whole batch from fresh envs

    pool = killed_then_replacement_fails(max_restarts=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(OSError, match="could not be built") as info:
            pool.wait([0])
    notes = "".join(info.value.__notes__)
    assert ("raised in rlcollect worker 0 on " in notes and "(failures, past max_worker_restarts=1: "
            "1. killed by the test; 2. OSError: the replacement's env could not be built)" in notes)
    assert FAIL_NEXT_BUILD == [0]


class SlowStartTransport(FakeTransport):
    """Once ``slow`` is set, a started worker answers its start only when ``release`` is called."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = False
        self.held: dict[int, list[Any]] = {}

    def spawn(self, worker: int, setup: WorkerSetup, timeout: float = math.inf, *,
              block: bool = True) -> None:
        super().spawn(worker, setup, timeout, block=block)
        if self.slow:
            self.held[worker], self.answers[worker] = self.answers[worker], []

    def release(self, worker: int) -> None:
        self.answers[worker] = self.held.pop(worker) + self.answers[worker]

    def waits_for(self, worker: int) -> str:
        return ": it waits for the test to release it"


def test_the_other_workers_report_while_a_replacement_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 0 dies; while its replacement has not started, worker 1's batches keep coming (the
    pool says once what the replacement waits for); once it starts, it collects the lost batch."""
    monkeypatch.setattr("rlcollect.workers.pool._TELL_AFTER", 0.0)
    transport = SlowStartTransport()
    pool = pool_of(transport, start_timeout=30.0)
    for worker in (0, 1):
        pool.collect(worker, (0, False, None))
    transport.slow = True
    transport.kill(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            worker, report = pool.wait_one([0, 1])
            assert worker == 1 and report.steps == STEPS
            pool.collect(1, (0, False, None))
    assert [str(w.message).split(" (")[0].split(";")[0] for w in caught] == [
        "rlcollect worker 0 failed",
        "rlcollect worker 0's replacement has not started after 0.0 s: it waits for the test to release it"]
    assert pool.restarts == [1, 0] and pool.busy() == {0, 1}
    transport.release(0)
    (worker, report), = pool.wait([0])
    assert worker == 0 and observations(report)[:, 0].tolist() == [[104.0, 0.0], [105.0, 0.0]]


def test_a_replacement_that_never_starts_counts_and_is_named() -> None:
    """A replacement not ready within start_timeout takes one more restart; past the budget the
    error says so, with every cause and the option that bounds them."""
    transport = SlowStartTransport()
    pool = pool_of(transport, start_timeout=0.3)
    pool.collect(0, (0, False, None))
    transport.slow = True
    transport.kill(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(RuntimeError, match=r"worker 0 failed past max_worker_restarts=1: its replacement "
                           r"did not start within start_timeout=0.3 s.*1\. killed by the test; 2\. its "):
            pool.wait([0])
    assert pool.restarts == [2, 0]
