"""Soak: a long MultiSync run with weight updates and a worker SIGKILLed every ~30 s.

Kept out of the default run (``-m 'not soak'`` in pyproject's addopts); run it with
``pytest -m soak tests/reliability/test_soak.py``. ``RLCOLLECT_SOAK_SECONDS`` sets its length
(default 600). After a warm-up, this process's resident memory, open file descriptors and
threads must stay flat, every frame must arrive exactly once and in order per env, and every
kill must have been survived by a restart.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
import warnings

import pytest
import torch

from rlcollect import MultiSyncCollector
from tests.envs_for_tests import CountingEnv, WeightedPolicy
from tests.reliability.test_fault_matrix import record

SECONDS = float(os.environ.get("RLCOLLECT_SOAK_SECONDS", "600"))
KILL_EVERY = 30.0  # seconds between worker kills
UPDATE_EVERY = 10  # batches between weight updates
RSS_GROWTH_MB = 40.0  # allowed growth of this process's resident memory after the warm-up
FD_GROWTH = 2  # allowed growth of open file descriptors after the warm-up

pytestmark = [pytest.mark.soak, pytest.mark.timeout(int(SECONDS) + 180)]


def rss_mb() -> float:
    """This process's resident memory (VmRSS), in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Continuity:
    """Checks, batch after batch, that each env's step counters go on by one: every frame
    exactly once and in order (a restarted worker's fresh envs have new uids, starting at 0)."""

    def __init__(self) -> None:
        self.next_step: dict[int, int] = {}
        self.frames = 0

    def check(self, batch: torch.Tensor) -> None:
        for row in batch:  # [T, 2]: one env's steps of this batch
            uid, steps = int(row[0, 0]), row[:, 1].long()
            first = self.next_step.get(uid, 0)
            expected = torch.arange(first, first + len(steps))
            assert torch.equal(steps, expected), f"env {uid}: got {steps.tolist()}, expected from {first}"
            self.next_step[uid] = first + len(steps)
            self.frames += len(steps)


def test_soak_multisync_with_kills_and_weight_updates() -> None:
    env = functools.partial(CountingEnv, episode_length=50, step_sleep=0.001)
    policy = WeightedPolicy(scale=1.0)
    warmup = min(60.0, SECONDS / 4)
    continuity = Continuity()
    samples: list[tuple[float, float, int, int]] = []  # (seconds, rss MB, fds, threads)
    kills = updates = batches = 0
    start = time.monotonic()
    next_kill = start + KILL_EVERY / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # one "restarting" warning per kill
        collector = MultiSyncCollector(env, policy, num_workers=2, frames_per_batch=2 * 50, seed=0,
                                       max_worker_restarts=10_000, timeout=30)
        try:
            for batch in collector:
                assert batch is not None
                continuity.check(batch["observation"])
                batches += 1
                now = time.monotonic()
                if batches % UPDATE_EVERY == 0:
                    with torch.no_grad():
                        policy.scale.fill_(1.0 if updates % 2 else -1.0)
                    collector.update_policy_weights_()
                    updates += 1
                if now >= next_kill:
                    victim = collector.worker_pids[kills % 2]
                    assert victim is not None
                    os.kill(victim, signal.SIGKILL)  # mid-batch: the next one is under way
                    kills += 1
                    next_kill = now + KILL_EVERY
                if now - start >= warmup and (not samples or now - samples[-1][0] - start >= 2.0):
                    samples.append((now - start, rss_mb(), open_fds(), threading.active_count()))
                if now - start >= SECONDS:
                    break
            stats = collector.stats()
        finally:
            collector.shutdown()
    assert kills >= max(1, int(SECONDS // KILL_EVERY) - 1)
    assert stats.restarts == kills  # every kill survived by one restart
    assert len(samples) >= 3
    base_rss, base_fds, base_threads = samples[0][1], samples[0][2], samples[0][3]
    growth = max(s[1] for s in samples) - base_rss
    fds = max(s[2] for s in samples) - base_fds
    threads = {s[3] for s in samples}
    figures = {
        "seconds": round(time.monotonic() - start, 1), "batches": batches, "frames": continuity.frames,
        "kills": kills, "restarts": stats.restarts, "weight_updates": updates,
        "rss_start_mb": round(base_rss, 1), "rss_growth_mb": round(growth, 1),
        "rss_end_mb": round(samples[-1][1], 1), "fds_start": base_fds, "fds_growth": fds,
        "threads": sorted(threads), "envs_seen": len(continuity.next_step),
    }
    record("soak", **figures)
    print("soak figures:", figures)
    assert growth < RSS_GROWTH_MB, figures
    assert fds <= FD_GROWTH, figures
    assert threads == {base_threads}, figures


def rss_of(pid: int) -> float:
    """Process ``pid``'s resident memory in MB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def slope_mb_per_minute(samples: list[tuple[float, float]]) -> float:
    """The least-squares slope of ``(seconds, MB)`` samples, in MB per minute."""
    times = torch.tensor([s[0] for s in samples], dtype=torch.float64)
    values = torch.tensor([s[1] for s in samples], dtype=torch.float64)
    centred = times - times.mean()
    return float((centred * (values - values.mean())).sum() / (centred**2).sum()) * 60.0


SLOPE_LIMIT = 0.5  # MB per minute, for this process and for each worker


def test_soak_memory_is_bounded_with_updates_every_batch_and_background_collection() -> None:
    """MultiAsync with a weight update every batch, beside a MultiSync collector writing a shared
    buffer in the background, nobody calling ``episodes()``: the resident memory of this process
    and of every worker grows by at most ``SLOPE_LIMIT`` MB a minute after the warm-up."""
    from rlcollect import MultiAsyncCollector, ReplayBuffer

    env = functools.partial(CountingEnv, episode_length=20, step_sleep=0.0005)
    policy = WeightedPolicy(scale=1.0)
    buffer = ReplayBuffer(20_000, storage="shared")
    background = MultiSyncCollector(env, WeightedPolicy(scale=1.0), num_workers=1, frames_per_batch=64,
                                    seed=1, replay_buffer=buffer)
    collector = MultiAsyncCollector(env, policy, num_workers=2, frames_per_batch=64, seed=0)
    warmup = min(60.0, SECONDS / 4)
    parent: list[tuple[float, float]] = []
    workers: dict[int, list[tuple[float, float]]] = {}
    start, batches = time.monotonic(), 0
    try:
        background.start()
        for batch in collector:
            assert batch is not None
            batches += 1
            with torch.no_grad():
                policy.scale.fill_(1.0 if batches % 2 else -1.0)
            collector.update_policy_weights_()
            now = time.monotonic() - start
            if now >= warmup and (not parent or now - parent[-1][0] >= 2.0):
                parent.append((now, rss_mb()))
                for pid in [*collector.worker_pids, *background.worker_pids]:
                    if pid is not None:
                        workers.setdefault(pid, []).append((now, rss_of(pid)))
            if now >= SECONDS:
                break
    finally:
        background.async_shutdown()
        collector.shutdown()
    slopes = {"parent": slope_mb_per_minute(parent)}
    slopes.update({f"worker {pid}": slope_mb_per_minute(s) for pid, s in workers.items() if len(s) >= 3})
    figures = {"seconds": round(time.monotonic() - start, 1), "batches": batches,
               "buffer_frames": len(buffer),
               "rss_start_mb": round(parent[0][1], 1), "rss_end_mb": round(parent[-1][1], 1),
               "slopes_mb_per_min": {k: round(v, 3) for k, v in slopes.items()}}
    record("soak_memory", **figures)
    print("soak memory figures:", figures)
    assert len(parent) >= 3 and len(slopes) == 4, figures  # this process and three workers
    assert all(slope <= SLOPE_LIMIT for slope in slopes.values()), figures
