"""The fault matrix: each fault the worker collectors survive (or report), for each collector.

Faults: a worker SIGKILLed mid-batch; an env raising in ``step`` once (the worker restarts and
collection goes on) or always (the error is raised past ``max_worker_restarts``); an env raising in
``reset``; a hung env, then a bounded shutdown (foreground and background); a worker that does not
start within ``start_timeout``; an error of background collection (raised by ``async_shutdown``
only once every process is stopped); an exception and a ``KeyboardInterrupt`` in the user's loop;
a real Ctrl-C (SIGINT to the whole process group); the parent SIGKILLed or SIGTERMed.

Every case checks, where it applies:

- exactly once, in order: :class:`~tests.envs_for_tests.CountingEnv` observes ``[uid, n]``; per
  env ``uid`` the ``n`` delivered are ``0, 1, 2, ...`` across batches, none twice and none skipped
  (a restarted worker builds fresh envs with the next seeds: new uids starting at 0; the batch the
  failed worker had under way is collected again, so its partial frames are never delivered);
- bounded recovery: the seconds from the fault to the next batch, or to the error, are measured
  and asserted (``RECOVERY_LIMIT``);
- nothing left: no worker process (``/proc`` status, zombies count as gone), no ``/dev/shm``
  entry this test created (named after one of its processes, or mapped by this one), no thread.

The measured times are written as JSON lines to ``$RLCOLLECT_RELIABILITY_REPORT`` when it is set.
Some of these cases moved here from ``tests/collectors/test_multi.py``, whose helpers they use.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import AsyncBatchedCollector, MultiAsyncCollector, MultiSyncCollector, ReplayBuffer
from rlcollect.collectors.pooled import PooledCollector
from rlcollect.workers.transport import start_forkserver
from tests.collectors.test_multi import alive, child_pids, shm_entries
from tests.envs_for_tests import CountingEnv, EnvBroke, WeightedPolicy

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]
RECOVERY_LIMIT = 10.0  # seconds from a fault to the next batch (or to its error)
EXIT_LIMIT = 10.0  # seconds for workers to exit once their parent is gone
KINDS = ["sync", "async"]


# -- what every case shares ----------------------------------------------------------------------
def build(kind: str, env: Any, *, batch_steps: int = 10, **kwargs: Any) -> PooledCollector:
    """Two workers of one env each (``env``: one factory, or one per worker), ``batch_steps`` steps
    per batch; ``batched``: an AsyncBatchedCollector serving a policy."""
    envs = env if isinstance(env, list) else [env, env]
    if kind == "batched":
        return AsyncBatchedCollector(envs, WeightedPolicy(), frames_per_batch=batch_steps, seed=0, **kwargs)
    cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
    rows = 2 if kind == "sync" else 1
    return cls(envs, None, frames_per_batch=rows * batch_steps, seed=0, **kwargs)


def frames_of(batches: list[TensorDictBase]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(uid, n)`` of every frame, row by row in delivery order."""
    rows = [row for batch in batches for row in batch]  # each row: one env's steps of one batch
    obs = torch.cat([row["observation"] for row in rows]) if rows else torch.zeros(0, 2)
    return obs[:, 0].long(), obs[:, 1].long()


def assert_exactly_once(batches: list[TensorDictBase]) -> dict[int, int]:
    """Per env uid, the step counters delivered are 0, 1, 2, ... in delivery order; return the
    frames delivered per uid."""
    uid, step = frames_of(batches)
    counts = {}
    for env_uid in uid.unique().tolist():
        steps = step[uid == env_uid]
        assert torch.equal(steps, torch.arange(len(steps))), (env_uid, steps.tolist())
        counts[int(env_uid)] = len(steps)
    return counts


def record(case: str, **figures: Any) -> None:
    """Append a case's measured figures to ``$RLCOLLECT_RELIABILITY_REPORT`` (JSON lines)."""
    path = os.environ.get("RLCOLLECT_RELIABILITY_REPORT")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"case": case, **figures}) + "\n")


def shm_of(pids: set[int]) -> set[str]:
    """The /dev/shm entries named after one of ``pids`` (torch's ``torch_<pid>_...``) or mapped by
    this process (named semaphores, shared memory): those a test here could have created."""
    entries = shm_entries()
    mapped = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "/dev/shm/" in line:
                mapped.add(line.rsplit("/dev/shm/", 1)[1].split()[0])
    named = {e for e in entries if any(f"_{pid}_" in e or e.endswith(f"_{pid}") for pid in pids)}
    return named | (entries & mapped)


def children() -> set[int]:
    """This process's live children, but its forkserver (one per process, for its lifetime)."""
    found = set()
    for pid in child_pids():
        try:
            if b"forkserver" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            continue
    return found


def other_threads(known: set[int | None]) -> list[str]:
    """Live threads not in ``known``, but multiprocessing's fd-sharing thread (it lives as long as
    this process once a shared tensor crossed a pipe)."""
    from multiprocessing import resource_sharer

    sharer = getattr(getattr(resource_sharer, "_resource_sharer", None), "_thread", None)
    return [t.name for t in threading.enumerate()
            if t.ident not in known and t.is_alive() and t is not sharer]


@pytest.fixture(scope="module", autouse=True)
def forkserver() -> None:
    """The forkserver restarts use while this process runs threads, started (importing torch)
    before the first case, so that no case's recovery time includes it."""
    start_forkserver()


class Leaks:
    """What a case starts with; :meth:`check` asserts nothing of it is left (waiting up to a few
    seconds for processes to be reaped)."""

    def __init__(self) -> None:
        self.children, self.shm = children(), shm_entries()
        self.threads = {t.ident for t in threading.enumerate()}
        self.workers: set[int] = set()

    def watch(self, collector: PooledCollector) -> None:
        """Remember the collector's current workers (call again after a restart)."""
        self.workers |= {pid for pid in collector.worker_pids if pid is not None}

    def check(self, within: float = 5.0) -> None:
        deadline = time.monotonic() + within
        while True:
            gc.collect()
            running = {pid for pid in self.workers if alive(pid)} | (children() - self.children)
            shm = shm_of({os.getpid(), *self.workers}) - self.shm
            threads = other_threads(self.threads)
            if not (running or shm or threads) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not running, f"processes left: {running}"
        assert not shm, f"/dev/shm entries left: {shm}"
        assert not threads, f"threads left: {threads}"


@pytest.fixture
def leaks() -> Iterator[Leaks]:
    yield Leaks()


def timed_batches(collector: PooledCollector, leaks: Leaks) -> Iterator[tuple[float, TensorDictBase]]:
    """The batches with their arrival time, watching every worker that appears."""
    for batch in collector:
        assert batch is not None
        leaks.watch(collector)
        yield time.monotonic(), batch.clone()


# -- a worker dies -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [*KINDS, "batched"])
def test_worker_sigkilled_mid_batch(kind: str, leaks: Leaks) -> None:
    """Worker 0 is SIGKILLed while it collects: it is restarted with fresh envs, its batch is
    collected again, and every frame delivered arrives once, in order."""
    env = functools.partial(CountingEnv, episode_length=50, step_sleep=0.01)
    collector = build(kind, env, batch_steps=20, total_frames=8 * 20 * (2 if kind == "sync" else 1),
                      timeout=30)
    killed_at: list[float] = []

    def kill() -> None:
        victim = collector.worker_pids[0]
        assert victim is not None
        killed_at.append(time.monotonic())
        os.kill(victim, signal.SIGKILL)

    batches, arrivals = [], []
    with pytest.warns(RuntimeWarning, match="worker 0 failed .* restarting it with fresh envs"):
        for index, (arrived, batch) in enumerate(timed_batches(collector, leaks)):
            batches.append(batch)
            arrivals.append(arrived)
            if index == 1:
                threading.Timer(0.1, kill).start()
    stats = collector.stats()
    collector.shutdown()
    assert stats.restarts == 1 and stats.workers[0].restarts == 1
    counts = assert_exactly_once(batches)
    assert set(counts) == {0, 1, 2}  # worker 0's envs: uid 0, then 2 after the restart
    recovery = min(t for t in arrivals if t > killed_at[0]) - killed_at[0]
    record("worker_sigkill", kind=kind, recovery_s=round(recovery, 3), frames=sum(counts.values()))
    assert recovery < RECOVERY_LIMIT
    leaks.check()


# -- an env raises ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [*KINDS, "batched"])
def test_env_raising_once_in_step_restarts_and_collection_goes_on(kind: str, leaks: Leaks,
                                                                  tmp_path: Path) -> None:
    once = functools.partial(CountingEnv, fail_at=25, fail_marker=str(tmp_path / "failed"))
    collector = build(kind, once, total_frames=12 * 10 * (2 if kind == "sync" else 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(timed_batches(collector, leaks))
    stats = collector.stats()
    collector.shutdown()
    assert stats.restarts == 1
    assert any("broke at step 25" in str(w.message) for w in caught)
    counts = assert_exactly_once([b for _, b in got])
    assert len(counts) == 3  # the broken env's worker came back with a fresh env
    gap = max(b - a for (a, _), (b, _) in zip(got, got[1:], strict=False))
    record("env_raises_once_in_step", kind=kind, recovery_s=round(gap, 3), frames=sum(counts.values()))
    assert gap < RECOVERY_LIMIT
    leaks.check()


BATCHED_RECOVERY_LIMIT = 2.0  # seconds: the longest wait for a batch across one worker's failure


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("fault", ["env_raises", "sigkill"])
def test_batched_collection_goes_on_while_a_worker_restarts(fault: str, groups: int, leaks: Leaks,
                                                            tmp_path: Path) -> None:
    """AsyncBatchedCollector replaces a failed worker in the background (through a forkserver that
    may still be importing): the other worker's batches keep coming, no wait between two batches
    is over 2 s, and every frame arrives once, in order. The run lasts about 8 s, so that the
    replacement is up before the last batch. ``groups=2``: 2 envs a worker, stepped one at a time
    (``env_groups=2``); an env that raises while the server acts for the other group."""
    marker = str(tmp_path / "failed")
    env = functools.partial(CountingEnv, episode_length=50, step_sleep=0.005,
                            **({"fail_at": 25, "fail_marker": marker} if fault == "env_raises" else {}))
    shape = {} if groups == 1 else {"env": [env] * 4, "envs_per_worker": 2, "env_groups": 2}
    # 10 steps of each of a worker's envs a batch; about 8 s either way (a step of 2 envs takes twice as long)
    collector = build("batched", shape.pop("env", env), batch_steps=10 * groups, total_frames=2 * 160 * 10,
                      timeout=30, **shape)
    faulted_at: list[float] = []
    got: list[tuple[float, TensorDictBase]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for arrived, batch in timed_batches(collector, leaks):
            got.append((arrived, batch))
            if fault == "sigkill" and len(got) == 4:
                victim = collector.worker_pids[0]
                assert victim is not None
                faulted_at.append(time.monotonic())
                os.kill(victim, signal.SIGKILL)
    stats = collector.stats()
    collector.shutdown()
    assert stats.restarts == 1
    assert any("restarting it with fresh envs" in str(w.message) for w in caught)
    counts = assert_exactly_once([b for _, b in got])
    assert len(counts) == 3 * groups  # the failed worker came back with fresh envs
    gap = max(b - a for (a, _), (b, _) in zip(got, got[1:], strict=False))
    record("batched_restart", fault=fault, groups=groups, longest_wait_s=round(gap, 3),
           frames=sum(counts.values()))
    assert gap < BATCHED_RECOVERY_LIMIT
    leaks.check()


@pytest.mark.parametrize("kind", KINDS)
def test_env_raising_always_in_step_raises_past_the_budget(kind: str, leaks: Leaks) -> None:
    always = functools.partial(CountingEnv, fail_at=15)
    collector = build(kind, always, total_frames=-1, max_worker_restarts=1)
    start, batches = time.monotonic(), []
    with pytest.raises(EnvBroke, match="broke at step 15") as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, batch in timed_batches(collector, leaks):
            batches.append(batch)
    elapsed = time.monotonic() - start
    assert any("raised in rlcollect worker" in note for note in getattr(info.value, "__notes__", []))
    assert collector._pool.closed  # the error shut the collector down
    assert_exactly_once(batches)
    record("env_raises_always_in_step", kind=kind, error_after_s=round(elapsed, 3))
    assert elapsed < 3 * RECOVERY_LIMIT
    leaks.check()


class ResetFailingEnv(CountingEnv):
    """A :class:`CountingEnv` whose ``fail_reset``-th reset raises (once, with a marker file)."""

    def __init__(self, fail_reset: int, marker: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_reset, self.marker, self.resets = fail_reset, marker, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.resets += 1
        if self.resets == self.fail_reset:
            self.fail_marker = self.marker
            if self._claim_failure():
                raise EnvBroke(f"env {self.uid} broke in reset {self.resets}")
        return super().reset(seed=seed, options=options)


@pytest.mark.parametrize("kind", KINDS)
def test_env_raising_in_reset(kind: str, leaks: Leaks, tmp_path: Path) -> None:
    """Once: the worker restarts and collection goes on, exactly once. Always: raised past the budget."""
    once = functools.partial(ResetFailingEnv, 3, str(tmp_path / "failed"), episode_length=7)
    collector = build(kind, once, total_frames=8 * 10 * (2 if kind == "sync" else 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(timed_batches(collector, leaks))
    collector.shutdown()
    assert collector.stats().restarts == 1 and any("broke in reset 3" in str(w.message) for w in caught)
    counts = assert_exactly_once([b for _, b in got])
    assert len(counts) == 3
    gap = max(b - a for (a, _), (b, _) in zip(got, got[1:], strict=False))
    record("env_raises_once_in_reset", kind=kind, recovery_s=round(gap, 3), frames=sum(counts.values()))
    assert gap < RECOVERY_LIMIT

    always = functools.partial(ResetFailingEnv, 2, None, episode_length=7)
    collector = build(kind, always, max_worker_restarts=0)
    with pytest.raises(EnvBroke, match="broke in reset 2"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in timed_batches(collector, leaks):
            pass
    leaks.check()


# -- hangs and slow starts -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [*KINDS, "batched"])
def test_hung_env_then_shutdown_is_bounded(kind: str, leaks: Leaks) -> None:
    """An env sleeping forever in ``step``: ``shutdown(timeout=2)`` ends within about 2 s (sync:
    prefetching, so that the next batch, which hangs, is under way)."""
    prefetch = {"prefetch": True} if kind == "sync" else {}
    collector = build(kind, functools.partial(CountingEnv, hang_at=15), timeout=60, **prefetch)
    assert collector.next() is not None
    leaks.watch(collector)
    start = time.monotonic()
    collector.shutdown(timeout=2.0)
    elapsed = time.monotonic() - start
    record("hung_env_shutdown", kind=kind, shutdown_s=round(elapsed, 3))
    assert elapsed < 3.0
    leaks.check()


@pytest.mark.parametrize("kind", [*KINDS, "batched"])
def test_shutdown_from_another_thread_ends_a_blocked_loop(kind: str, leaks: Leaks) -> None:
    """The loop waits on a hung env; another thread calls ``shutdown(timeout=2)``: the loop gets
    ``RuntimeError`` saying the workers were shut down once they are (within the shutdown's bound:
    its own shutdown waits for the first); a later ``shutdown()`` returns at once, all stopped."""
    collector = build(kind, functools.partial(CountingEnv, hang_at=15), timeout=60)
    assert collector.next() is not None
    leaks.watch(collector)
    first = threading.Timer(0.3, collector.shutdown, kwargs={"timeout": 2.0})
    start = time.monotonic()
    first.start()
    with pytest.raises(RuntimeError, match="the workers were shut down"):
        for _ in collector:  # every env hangs at its 15th step: the loop ends up waiting
            pass
    raised = time.monotonic() - start
    time.sleep(max(0.0, 0.5 - raised))  # the first shutdown is waiting for the hung worker
    collector.shutdown(timeout=10.0)
    returned = time.monotonic() - start
    assert not any(alive(pid) for pid in leaks.workers)
    first.join()
    record("shutdown_from_another_thread", kind=kind, loop_raised_s=round(raised, 3),
           second_shutdown_returned_s=round(returned, 3))
    assert 2.0 <= raised < 4.0  # the first shutdown waited 2 s for the hung worker, then ended it
    assert returned - raised < 1.0
    leaks.check(within=0.5)


@pytest.mark.parametrize("kind", [*KINDS, "batched"])
def test_background_shutdown_with_a_hung_env_honours_its_timeout(kind: str, leaks: Leaks) -> None:
    """Background collection into a shared buffer, one env hung: ``async_shutdown(timeout=2)``
    takes at most the timeout and a second, and leaves nothing running."""
    buffer = ReplayBuffer(10_000, storage="shared")
    hung = functools.partial(CountingEnv, hang_at=25)
    collector = build(kind, [hung, CountingEnv], replay_buffer=buffer, timeout=60)
    collector.start()
    deadline = time.monotonic() + 30
    while buffer.write_count < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    leaks.watch(collector)
    start = time.monotonic()
    collector.async_shutdown(timeout=2.0)
    elapsed = time.monotonic() - start
    record("background_hung_env_shutdown", kind=kind, shutdown_s=round(elapsed, 3))
    assert elapsed <= 3.0
    leaks.check(within=0.5)


@pytest.mark.parametrize("kind", KINDS)
def test_a_background_error_is_raised_after_every_process_stopped(kind: str, leaks: Leaks) -> None:
    """Worker 0's env raises past the budget during background collection: the workers are
    released at once, and ``async_shutdown`` raises the error only once none is running."""
    buffer = ReplayBuffer(10_000, storage="shared")
    broken = functools.partial(CountingEnv, fail_at=25, step_sleep=0.002)
    slow = functools.partial(CountingEnv, step_sleep=0.002)
    collector = build(kind, [broken, slow], replay_buffer=buffer, max_worker_restarts=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collector.start()
        deadline = time.monotonic() + 30
        while collector._background.error is None and time.monotonic() < deadline:
            leaks.watch(collector)
            time.sleep(0.02)
    failed_at = time.monotonic()
    exit_deadline = failed_at + RECOVERY_LIMIT  # released already: they exit by themselves
    while any(alive(pid) for pid in leaks.workers) and time.monotonic() < exit_deadline:
        time.sleep(0.05)
    released = time.monotonic() - failed_at
    assert not any(alive(pid) for pid in leaks.workers), "the workers kept running after the error"
    with pytest.raises(EnvBroke, match="broke at step 25"):
        collector.async_shutdown(timeout=5.0)
    record("background_error", kind=kind, workers_released_s=round(released, 3))
    leaks.check(within=0.5)


def test_a_background_error_is_raised_by_pause_after_every_process_stopped(leaks: Leaks) -> None:
    buffer = ReplayBuffer(10_000, storage="shared")
    collector = build("sync", functools.partial(CountingEnv, fail_at=25), replay_buffer=buffer,
                      max_worker_restarts=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collector.start()
        time.sleep(0.2)
        leaks.watch(collector)
        with pytest.raises(EnvBroke, match="broke at step 25"), collector.pause(timeout=30):
            pass
    assert collector._pool.closed and not any(alive(pid) for pid in leaks.workers)
    leaks.check(within=0.5)


class SlowToRebuildEnv(CountingEnv):
    """A :class:`CountingEnv` that fails once (creating ``marker``); built again after that (in a
    restarted worker), it takes ``delay`` seconds to construct."""

    def __init__(self, marker: str, delay: float = 5.0, **kwargs: Any) -> None:
        if os.path.exists(marker):
            time.sleep(delay)
        super().__init__(fail_marker=marker, **kwargs)


@pytest.mark.parametrize("kind", KINDS)
def test_shutdown_while_a_restart_is_under_way_leaves_nothing(kind: str, leaks: Leaks,
                                                              tmp_path: Path) -> None:
    """Background collection restarts a failed worker (its env takes 5 s to build) when
    ``async_shutdown(timeout=2)`` comes: the restart is abandoned, the shutdown keeps to its
    timeout, and no worker outlives it."""
    buffer = ReplayBuffer(10_000, storage="shared")
    broken = functools.partial(SlowToRebuildEnv, str(tmp_path / "failed"), fail_at=15, step_sleep=0.005)
    collector = build(kind, [broken, CountingEnv], replay_buffer=buffer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collector.start()
        deadline = time.monotonic() + 60
        while collector._pool.restarts[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert collector._pool.restarts[0] == 1
        time.sleep(0.2)  # the new worker is building its env
        start = time.monotonic()
        collector.async_shutdown(timeout=2.0)
        elapsed = time.monotonic() - start
    assert not children() - leaks.children, "a worker outlived the shutdown"
    record("shutdown_during_restart", kind=kind, shutdown_s=round(elapsed, 3))
    assert elapsed <= 3.0
    leaks.check(within=0.5)


def test_a_worker_that_does_not_start_in_time_leaves_nothing(leaks: Leaks) -> None:
    """``start_timeout`` bounds the start (a spawned worker imports torch: not within 0.2 s); the
    start-up error is raised once every worker started so far is stopped."""
    collector = MultiSyncCollector([CountingEnv, CountingEnv], None, frames_per_batch=8,
                                   start_method="spawn", start_timeout=0.2, timeout=60)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not start within start_timeout=0.2 s"):
        collector.next()
    elapsed = time.monotonic() - start
    assert not children() - leaks.children  # none left when the error arrived
    record("start_timeout", kind="sync", error_after_s=round(elapsed, 3))
    assert elapsed < RECOVERY_LIMIT
    leaks.check(within=0.5)


def make_env_only_in_the_parent() -> Any:
    """A CountingEnv in the process that built the collector; an error in a worker."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        raise EnvBroke("this env cannot be built in a worker")
    return CountingEnv()


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_that_cannot_start_raises_and_leaves_no_process(kind: str, leaks: Leaks) -> None:
    collector = build(kind, make_env_only_in_the_parent, max_worker_restarts=0)
    with pytest.raises(EnvBroke, match="cannot be built in a worker"):
        collector.next()
    assert not children() - leaks.children
    leaks.check(within=0.5)


COLD_FORKSERVER = """
import sys, time
from rlcollect import MultiSyncCollector
from tests.envs_for_tests import make_cartpole

if __name__ == "__main__":
    collector = MultiSyncCollector(make_cartpole, None, num_workers=2, frames_per_batch=8,
                                   start_method="forkserver", start_timeout=float(sys.argv[1]))
    start = time.monotonic()
    try:
        collector.next()
        print("started", time.monotonic() - start)
    except TimeoutError as error:
        print("timeout", time.monotonic() - start, error)
    collector.shutdown()
"""


def test_start_timeout_bounds_a_cold_forkserver(tmp_path: Path) -> None:
    """A forkserver started just now imports torch before it hands out a worker (seconds):
    ``start_timeout`` bounds that wait too, with an error naming it; a tolerant one lets it finish."""
    script = tmp_path / "cold.py"
    script.write_text(COLD_FORKSERVER)
    outputs = {}
    for start_timeout in ("0.3", "120"):
        done = subprocess.run([sys.executable, str(script), start_timeout], capture_output=True, text=True,
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=150)
        outputs[start_timeout] = done.stdout.split(maxsplit=2)
        assert done.returncode == 0, done.stderr
    kind, seconds, message = outputs["0.3"]
    assert kind == "timeout" and "start_timeout=0.3 s" in message and float(seconds) < 1.5
    assert outputs["120"][0] == "started"
    started = float(outputs["120"][1])
    record("cold_forkserver", timeout_s=round(float(seconds), 3), started_s=round(started, 3))


# -- the user's loop -------------------------------------------------------------------------------
@pytest.mark.parametrize("error", [ZeroDivisionError, KeyboardInterrupt])
@pytest.mark.parametrize("kind", [*KINDS, "batched"])
def test_an_error_in_the_users_loop_leaves_the_collector_to_its_owner(kind: str, error: type[BaseException],
                                                                       leaks: Leaks) -> None:
    """An error in the loop's body leaves the loop as a ``break`` does (as in TorchRL): the collector
    goes on, and the next loop resumes where that one stopped, no frame lost or repeated; inside
    ``with collector:`` it is shut down, every process stopped, as the error leaves the block."""
    collector = build(kind, functools.partial(CountingEnv, step_sleep=0.002), total_frames=-1)
    batches: list[TensorDictBase] = []
    raised_at = [0.0]

    def loop(stop_after: int) -> None:
        for batch in collector:
            assert batch is not None
            batches.append(batch.clone())
            leaks.watch(collector)
            if len(batches) % stop_after == 0:
                raised_at[0] = time.monotonic()
                raise error("raised in the loop's body")

    with pytest.raises(error):
        loop(3)
    with pytest.raises(error):
        loop(3)  # the same collector, going on
    assert not collector._pool.closed
    with pytest.raises(error), collector:
        loop(4)
    elapsed = time.monotonic() - raised_at[0]
    assert collector._pool.closed and not any(alive(pid) for pid in leaks.workers)
    assert_exactly_once(batches)
    assert len(batches) == 8
    record("error_in_loop", kind=kind, error=error.__name__, shutdown_s=round(elapsed, 3))
    assert elapsed < RECOVERY_LIMIT
    leaks.check(within=0.5)


# -- signals from outside: a subprocess runs the collector -------------------------------------------
SCRIPT = """
import os, signal, sys, time
from rlcollect import AsyncBatchedCollector, MultiAsyncCollector, MultiSyncCollector
from tests.envs_for_tests import CountingEnv, WeightedPolicy
import functools

if __name__ == "__main__":
    kind = sys.argv[1]
    env = functools.partial(CountingEnv, step_sleep=0.005)
    if kind == "batched":
        collector = AsyncBatchedCollector([env, env], WeightedPolicy(), frames_per_batch=10)
    else:
        cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
        collector = cls([env, env], None, frames_per_batch=20 if kind == "sync" else 10)
    for index, batch in enumerate(collector):
        if index == 2:
            print(*collector.worker_pids, flush=True)
            if sys.argv[2] == "body":
                time.sleep(60)  # the signal comes while the loop's body runs (sync workers idle)
"""


def run_and_signal(tmp_path: Path, kind: str, sig: int, *, group: bool, where: str = "collect"
                   ) -> tuple[int, str, list[int], float]:
    """Run SCRIPT, send ``sig`` (to its whole process group, as a terminal's Ctrl-C does, when
    ``group``) while it collects (``where="body"``: while its loop's body sleeps); return its exit
    code, stderr, worker pids and the seconds the workers took to exit."""
    # a child inherits an ignored SIGINT (Python then installs no KeyboardInterrupt handler)
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN, "this test process ignores SIGINT"
    script = tmp_path / "collect.py"
    script.write_text(SCRIPT)
    process = subprocess.Popen([sys.executable, str(script), kind, where], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert process.stdout is not None
        workers = [int(pid) for pid in process.stdout.readline().split()]
        assert len(workers) == 2, process.communicate(timeout=30)[1]
        time.sleep(0.3)  # mid-batch
        sent = time.monotonic()
        if group:
            os.killpg(process.pid, sig)
        else:
            os.kill(process.pid, sig)
        _, stderr = process.communicate(timeout=60)
        while any(alive(pid) for pid in workers) and time.monotonic() < sent + 3 * EXIT_LIMIT:
            time.sleep(0.05)
        return process.returncode, stderr, workers, time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("where", ["collect", "body"])
@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_gives_one_keyboard_interrupt(kind: str, where: str, tmp_path: Path) -> None:
    """SIGINT to the whole process group (a terminal's Ctrl-C), while batches are collected or
    while the loop's body runs: workers ignore it, the parent raises one KeyboardInterrupt out of
    its loop and shuts them down; one traceback in all."""
    code, stderr, workers, elapsed = run_and_signal(tmp_path, kind, signal.SIGINT, group=True, where=where)
    assert code != 0
    assert stderr.count("Traceback") == 1 and stderr.count("KeyboardInterrupt") == 1, stderr
    assert not any(alive(pid) for pid in workers)
    record("ctrl_c", kind=kind, where=where, workers_gone_s=round(elapsed, 3))


@pytest.mark.parametrize(("kind", "sig"), [("sync", signal.SIGKILL), ("async", signal.SIGKILL),
                                           ("batched", signal.SIGKILL), ("sync", signal.SIGTERM),
                                           ("async", signal.SIGTERM)])
def test_workers_exit_when_their_parent_is_killed(kind: str, sig: int, tmp_path: Path) -> None:
    """Forked siblings hold each other's pipe ends, so a worker cannot rely on end-of-file: it
    watches its parent (idle, or waiting for the policy server) and exits within seconds."""
    code, stderr, workers, elapsed = run_and_signal(tmp_path, kind, sig, group=False)
    assert code == -sig, stderr
    assert not any(alive(pid) for pid in workers), "workers outlived their parent"
    record("parent_killed", kind=kind, signal=signal.Signals(sig).name, workers_gone_s=round(elapsed, 3))
    assert elapsed < EXIT_LIMIT


def test_matrix_helpers_catch_a_lost_or_repeated_frame() -> None:
    """The exactly-once check itself: a repeated or skipped step counter fails it."""
    def batch(uid: int, steps: list[int]) -> TensorDictBase:
        from tensordict import TensorDict

        obs = torch.tensor([[uid, s] for s in steps], dtype=torch.float64)[None]
        return TensorDict({"observation": obs}, batch_size=[1, len(steps)])

    assert assert_exactly_once([batch(0, [0, 1]), batch(0, [2, 3])]) == {0: 4}
    for steps in ([0, 1, 1, 2], [0, 1, 3]):
        with pytest.raises(AssertionError):
            assert_exactly_once([batch(0, steps[:2]), batch(0, steps[2:])])
