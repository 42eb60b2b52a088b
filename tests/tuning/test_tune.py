"""``rlcollect.tune`` and ``rlcollect tune``: the costs measured against envs and policies of known
cost, the predictions against the formula written out, the pick against its own trials, the code
it prints building a working collector, and every bad argument named."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import rlcollect
from rlcollect.cli.main import main
from rlcollect.tuning import Candidate, Costs, measure_costs, tune
from rlcollect.tuning.candidates import candidates, predict

ENV_US, POLICY_US = 400.0, 600.0  # per env step; per forward pass (whatever its batch)


def _spin(microseconds: float) -> None:
    end = time.perf_counter() + microseconds / 1e6
    while time.perf_counter() < end:
        pass


class SpinEnv(gym.Env[np.ndarray, int]):
    """Costs ENV_US per step; episodes of 50 steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        _spin(ENV_US)
        self.t += 1
        return np.zeros(3, np.float32), 1.0, False, self.t >= 50, {}


class SpinPolicy(nn.Module):
    """Costs POLICY_US per forward pass, whatever the batch: POLICY_US / N per frame."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        _spin(POLICY_US)
        return torch.zeros(observation.shape[0], dtype=torch.int64)


@pytest.mark.timeout(60)
@pytest.mark.alone  # it times spins against the clock: another case running beside it inflates them
def test_costs_are_the_env_step_and_the_forward_pass_per_frame() -> None:
    costs = measure_costs(SpinEnv, SpinPolicy(), sizes=(1, 2, 4), seconds=3.0)
    assert sorted(costs.policy_us) == [1, 2, 4]
    # the least of several rounds: no faster than the spin, and not much slower on a loaded machine
    assert ENV_US <= costs.env_us < 1.6 * ENV_US
    for size, per_frame in costs.policy_us.items():
        assert POLICY_US / size <= per_frame < 1.6 * POLICY_US / size, size
    assert costs.best_batch_size == 4 and costs.policy_at(3) == costs.policy_us[2]
    assert costs.limit == pytest.approx(costs.cores * 1e6 / (costs.env_us + costs.policy_us[4]))


def test_predictions_follow_the_costs() -> None:
    costs = Costs(env_us=100.0, policy_us={1: 80.0, 2: 50.0, 4: 30.0}, loop_us=10.0, cores=2)
    single = Candidate("Collector", 1, 4, 16)
    assert predict(single, costs) == pytest.approx(1e6 / (100 + 10 + 30))
    # one process per core at most: 4 workers on 2 cores go no faster than 2
    assert predict(Candidate("MultiSyncCollector", 2, 2, 16), costs) == pytest.approx(2e6 / (100 + 10 + 50))
    assert predict(Candidate("MultiAsyncCollector", 4, 1, 16), costs) == pytest.approx(2e6 / (100 + 10 + 80))
    # a server's pass over all 4 envs, which the workers wait for
    served = Candidate("AsyncBatchedCollector", 2, 2, 16)
    assert predict(served, costs) == pytest.approx(min(2e6 / (110 + 30), 2e6 / (110 + 2 * 30)))


def test_candidates_keep_the_given_envs_and_batch() -> None:
    costs = Costs(env_us=100.0, policy_us={1: 80.0, 8: 20.0}, loop_us=10.0, cores=2)
    kinds = ("MultiSyncCollector", "MultiAsyncCollector", "Collector", "AsyncBatchedCollector")
    fixed = list(candidates(costs, kinds, num_envs=8, max_envs=64, frames_per_batch=256))
    assert {c.kind for c in fixed} == set(kinds)
    assert all(c.num_envs == 8 and c.frames_per_batch == 256 for c in fixed)
    assert {(c.kind, c.workers) for c in fixed if c.kind != "Collector"} == {
        (k, w) for k in kinds if k != "Collector" for w in (2, 4)}  # up to 2 workers per core
    free = list(candidates(costs, ("Collector",), num_envs=None, max_envs=16, frames_per_batch=None))
    assert [c.num_envs for c in free] == [1, 2, 4, 8, 16]
    assert all(16 <= c.steps <= 256 and c.steps & (c.steps - 1) == 0 for c in free)
    # a batch that 3 envs cannot fill evenly: no candidate
    assert list(candidates(costs, ("Collector",), num_envs=3, max_envs=64, frames_per_batch=100)) == []


def test_a_servers_workers_stepping_in_groups_are_weighed_where_the_envs_can() -> None:
    costs = Costs(env_us=100.0, policy_us={1: 80.0, 2: 50.0, 4: 30.0}, loop_us=10.0, cores=2,
                  steps_in_groups=True)
    grouped = [c for c in candidates(costs, ("AsyncBatchedCollector",), num_envs=8, max_envs=8,
                                     frames_per_batch=None) if c.env_groups == 2]
    # 1 worker too (the server works while it steps); each group an even share of a worker's envs
    assert {(c.workers, c.envs_per_worker) for c in grouped} == {(1, 8), (2, 4), (4, 2)}
    one = next(c for c in grouped if c.workers == 1)
    # the server's passes of 4 envs (30 us a frame) overlap the one worker's stepping (110 us)
    assert predict(one, costs) == pytest.approx(min(2e6 / (110 + 30), 1e6 / 110, 1e6 / 30))
    assert one.arguments()["env_groups"] == 2 and "1 x 8 envs in 2 groups" in one.label
    assert "env_groups=2" in one.code()
    without = replace(costs, steps_in_groups=False)  # a vector env or a pool steps all its envs at once
    assert all(c.env_groups == 1 for c in candidates(without, ("AsyncBatchedCollector",), num_envs=8,
                                                     max_envs=8, frames_per_batch=None))


def test_an_env_object_that_brings_its_own_envs_is_one_per_process() -> None:
    costs = Costs(env_us=100.0, policy_us={64: 5.0}, loop_us=10.0, cores=2, batched=64)
    kinds = ("MultiSyncCollector", "MultiAsyncCollector", "Collector", "AsyncBatchedCollector")
    weighed = list(candidates(costs, kinds, num_envs=None, max_envs=8, frames_per_batch=None))
    # one object per process (max_envs does not count: the object fixes its envs), no server
    assert {(c.kind, c.workers) for c in weighed} == {
        ("Collector", 1), *((k, w) for k in ("MultiSyncCollector", "MultiAsyncCollector") for w in (2, 4))}
    assert all(c.envs_per_worker == 1 and c.batched == 64 for c in weighed)
    single = next(c for c in weighed if c.kind == "Collector")
    assert single.arguments() == {"frames_per_batch": 64 * single.steps}  # no num_envs: the object's own
    assert "64 envs (one env object)" in single.label
    assert predict(single, costs) == pytest.approx(1e6 / (100 + 10 + 5))  # the policy on all 64 at once
    sync = next(c for c in weighed if c.kind == "MultiSyncCollector" and c.workers == 2)
    assert sync.arguments()["num_envs_per_worker"] == 1 and sync.frames_per_batch == 2 * 64 * sync.steps
    assert predict(sync, costs) == pytest.approx(2e6 / (100 + 10 + 5))
    fixed = list(candidates(costs, kinds, num_envs=128, max_envs=8, frames_per_batch=128 * 32))
    assert {(c.kind, c.workers, c.steps) for c in fixed} == {("MultiSyncCollector", 2, 32),
                                                             ("MultiAsyncCollector", 2, 64)}


def _cartpole_vector() -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=32)  # Gymnasium's default: NEXT_STEP, one object


@pytest.mark.timeout(120)
def test_tune_weighs_a_vector_env_and_its_pick_collects() -> None:
    result = tune(_cartpole_vector, seconds=6, kinds=("Collector", "MultiSyncCollector"), progress=False)
    assert result.costs.batched == 32 and sorted(result.costs.policy_us) == [32]
    ran = [t for t in result.trials if t.error is None]
    assert {t.candidate.kind for t in ran} == {"Collector", "MultiSyncCollector"}, result.trials
    assert "one env object" in str(result)
    with result.build(total_frames=2 * result.pick.candidate.frames_per_batch) as collector:
        batches = list(collector)
    assert len(batches) >= 2 and batches[0].shape[0] == 32 * result.pick.candidate.workers


@pytest.mark.timeout(120)
def test_tune_picks_its_fastest_trial_and_builds_it() -> None:
    result = tune("CartPole-v1", seconds=8, max_envs=8, kinds=("Collector", "MultiSyncCollector"),
                  progress=False)
    ran = [t for t in result.trials if t.error is None]
    assert {t.candidate.kind for t in ran} == {"Collector", "MultiSyncCollector"}
    assert result.pick is ran[0] and result.pick.fps == max(t.fps for t in ran) > 0
    assert all(t.startup_seconds > 0 and t.predicted_fps > 0 for t in ran)
    assert result.limit > 0 and result.seconds < 30
    text = str(result)
    assert result.pick.candidate.label in text and "collector = rlcollect." in text

    pick = result.pick.candidate
    code = result.code()
    exec(code, {})  # the printed code runs as pasted (a collector without end, never iterated)
    code = code.replace("total_frames=-1", f"total_frames={2 * pick.frames_per_batch}")
    scope: dict[str, Any] = {}
    exec(code, scope)  # the printed code, as a user pastes it
    with scope["collector"] as collector:
        shapes = [batch.numel() for batch in collector]
    assert type(collector).__name__ == pick.kind
    assert shapes == [pick.frames_per_batch] * 2


@pytest.mark.parametrize(("arguments", "message"), [
    ({"seconds": 0}, r"seconds must be a number in \(0, 86400.0\] \(a day at most\), got 0"),
    ({"num_envs": 0}, "num_envs must be a positive integer, got 0"),
    ({"frames_per_batch": 2.5}, "frames_per_batch must be a positive integer, got 2.5"),
    ({"kinds": ("Collector", "SyncDataCollector")}, "kinds must be some of"),
    ({"num_envs": 3, "frames_per_batch": 100, "kinds": ("Collector",)}, "no configuration of"),
])
def test_bad_arguments_are_named(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tune("CartPole-v1", **{"seconds": 2, "progress": False, **arguments})


@pytest.mark.timeout(120)
def test_the_command_prints_the_pick_and_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert rlcollect.tune is tune
    status = main(["tune", "--env", "CartPole-v1", "--policy", "tests.cli.policies_for_tests:always_zero",
                   "--seconds", "5", "--max-envs", "4", "--kinds", "Collector", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0
    assert "the limit" in out and "pick: Collector (" in out
    assert "from tests.cli.policies_for_tests import always_zero" in out
    assert "collector = rlcollect.Collector('CartPole-v1', policy, num_envs=" in out
    assert "torch.set_num_threads(1)" in out  # the thread setting every trial ran at

    assert main(["tune", "--seconds", "0"]) == 2
    assert main(["tune", "--kinds", "Nope"]) == 2
    assert "must be a number of seconds > 0" in capsys.readouterr().err
    for endless in ("inf", "nan", "1e9"):  # tuning must end
        assert main(["tune", "--seconds", endless]) == 2
        assert f"at most 86400 (a day), got '{endless}'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"seconds must be a number in \(0, 86400.0\]"):
        tune("CartPole-v1", seconds=float("inf"))


@pytest.mark.timeout(60)
def test_without_a_policy_no_server_is_tried() -> None:
    result = tune("CartPole-v1", seconds=4, max_envs=2, progress=False)
    assert "AsyncBatchedCollector" not in {t.candidate.kind for t in result.trials}
    with pytest.raises(RuntimeError, match="no configuration could run: AsyncBatched.*serves a policy"):
        tune("CartPole-v1", seconds=2, max_envs=2, kinds=("AsyncBatchedCollector",), progress=False)


POLICY_MODULE = """
from typing import Any

import torch


class Left(torch.nn.Module):
    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.zeros(observation.shape[0], dtype=torch.int64)


def make_policy(observation_space: Any, action_space: Any) -> torch.nn.Module:
    assert observation_space.shape == (4,) and action_space.n == 2
    return Left()
"""


@pytest.mark.timeout(120)
def test_the_printed_code_runs_when_pasted_beside_the_policy_module(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "my_policies.py").write_text(POLICY_MODULE)
    monkeypatch.chdir(tmp_path)  # --policy names modules of the current folder
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["tune", "--env", "CartPole-v1", "--policy", "my_policies:make_policy", "--seconds", "4",
                 "--max-envs", "2", "--kinds", "Collector", "--no-progress"]) == 0
    out = capsys.readouterr().out
    code = textwrap.dedent(out[out.index("    import torch\n"):])
    used = "batch = next(iter(collector))\nprint(batch['action'].sum().item(), torch.get_num_threads())\n"
    (tmp_path / "picked.py").write_text(f"{code}{used}collector.shutdown()\n")
    done = subprocess.run([sys.executable, "picked.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=100)
    assert done.returncode == 0, code + done.stderr
    assert done.stdout.split() == ["0", "1"], done.stdout  # the module's policy acted, at one thread
