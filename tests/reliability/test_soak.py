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
