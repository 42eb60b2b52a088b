"""The examples learn: each runs a short seeded configuration and must beat a measured threshold.

The thresholds were measured with the seeds used here on a shared 2-core CPU machine (see the
comments) and leave a wide margin: these tests catch an example (or a collector under it) that
stops learning, not a small regression in sample efficiency.

The examples live in ``examples/``, not in a package: the folder goes on ``sys.path`` so that the
worker processes (``spawn``) can import the example's modules too (they inherit ``sys.path``).
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples")

pytestmark = pytest.mark.learning  # a minute in all: run apart, with -m learning


@pytest.fixture(scope="module")
def examples_on_path() -> Iterator[None]:
    sys.path.insert(0, EXAMPLES)
    yield
    sys.path.remove(EXAMPLES)


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("examples_on_path")
def test_ppo_cartpole_learns_within_40k_frames() -> None:
    ppo = importlib.import_module("ppo_cartpole")
    args = ppo.Args(seed=0, frames=40_000, log_every=0, out="")
    result = ppo.main(args)

    # Measured at 40k frames, mean return of the last 20 episodes: 499.7 with seed 0 (the same in
    # repeated runs: MultiSyncCollector is deterministic), 500.0 and 483.3 with seeds 1 and 2.
    # Random play scores ~22.
    assert result.frames == 39_936  # whole batches of 8 envs x 32 steps, never past `frames`
    assert result.episodes >= 20
    assert result.final_return > 200.0, result.final_return


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("examples_on_path")
def test_sac_pendulum_learns_within_8k_frames() -> None:
    sac = importlib.import_module("sac_pendulum")
    args = sac.Args(seed=0, frames=8_000, log_every=0, out="")
    result = sac.main(args)

    # At 6k frames about one run in four (background collection is not bit-for-bit repeatable)
    # ended half-learned (last 10 episodes -640 to -800, with or without load), so the test runs
    # 8k. Measured at 8k frames (seed 0, 4 runs, 2026-12-02): mean return of the first 10 training
    # episodes -1127 to -1163 (random actions), of the last 10 -74 to -135, deterministic
    # evaluation -109 to -111.
    assert result.frames == 8_000
    assert result.updates == 7_000  # UTD 1 after the 1,000 random frames
    # 8k frames hold 40 Pendulum episodes of 200 steps; the async workers need not collect the same
    # number of frames, so each may end with one episode unfinished
    assert 38 <= result.episodes <= 40
    assert result.pushes == 700  # one weight push every 10 updates
    assert 0.0 < result.sampled_lag < result.pushes  # frames in the buffer are older than the learner
    assert math.isfinite(result.first_return) and math.isfinite(result.final_return)
    assert result.final_return > result.first_return + 400.0, (result.first_return, result.final_return)
    assert result.final_return > -600.0, result.final_return
    assert result.eval_return > -600.0, result.eval_return


@pytest.mark.timeout(400)
@pytest.mark.usefixtures("examples_on_path")
def test_lstm_ppo_cartpole_without_velocities_learns_to_remember() -> None:
    lstm = importlib.import_module("lstm_ppo_cartpole")
    args = lstm.Args(seed=0, frames=40_000, log_every=0, out="")
    result = lstm.main(args)

    # The replayed log-probabilities (from the state the batch stores, reset where is_init) equal
    # the ones the workers stored: 0.0 measured.
    assert result.replay_error < 1e-5, result.replay_error
    # Measured (seed 0, 2026-12-03): the best mean of 20 episodes reached 193 by 38k frames with
    # memory; the same network without memory (--no-memory) stays under 60 through 60k frames.
    # Random play scores ~22.
    assert result.frames == 39_936
    assert result.best_return > 100.0, result.best_return
