"""AsyncBatchedCollector: one policy server for every env worker.

Its batches equal the single-process collector's (tests/collectors/test_parity.py runs every
option through it, tests/collectors/test_resume.py its exact resume). Here: what the server adds
(every frame stamped with the version whose weights chose it, forward passes over several workers,
extras written back), faults (a killed worker reconnects, a failing policy is raised here) and the
arguments.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule

from rlcollect import AsyncBatchedCollector, MultiSyncCollector, ReplayBuffer
from rlcollect.weights import MultiProcessWeightSyncScheme, NoWeightSyncScheme
from tests.collectors.test_multi import alive, child_pids, shm_entries
from tests.collectors.test_shared_buffer import check_frames
from tests.envs_for_tests import CountingEnv, TiltPolicy, WeightedPolicy, make_cartpole

pytestmark = pytest.mark.timeout(90)


def test_every_frame_carries_the_version_whose_weights_chose_its_action() -> None:
    """Updates land between two forward passes, so a batch may mix versions; each frame's action
    must be the one its stamped version gives (WeightedPolicy: 1 for scale > 0, else 0)."""
    env = functools.partial(CountingEnv, episode_length=30, step_sleep=0.002)
    frames = []
    with AsyncBatchedCollector(env, WeightedPolicy(scale=1.0), num_envs=4, envs_per_worker=2,
                               frames_per_batch=2 * 25, total_frames=16 * 50) as collector:
        for index, batch in enumerate(collector):
            assert batch is not None and batch.shape == (2, 25)
            frames.append(batch)
            if index in (3, 8):  # scale -1 (action 0), then +1 (action 1): versions 1 and 2
                collector.update_policy_weights_(WeightedPolicy(scale=-1.0 if index == 3 else 1.0))
        assert collector.stats().policy_version == 2
    versions = torch.cat([b["policy_version"].flatten() for b in frames])
    actions = torch.cat([b["action"].flatten() for b in frames])
    assert set(versions.tolist()) == {0, 1, 2}
    assert torch.equal(actions, (versions != 1).long())
    for batch in frames:  # within a row, time runs forward: versions never go back
        assert (batch["policy_version"].diff(dim=1) >= 0).all()


def test_the_server_runs_a_copy_updated_only_by_update_policy_weights() -> None:
    policy = WeightedPolicy(scale=1.0)  # action 1
    with AsyncBatchedCollector(make_cartpole, policy, num_envs=2, frames_per_batch=10) as collector:
        collector.next()
        with torch.no_grad():
            policy.scale.fill_(-1.0)  # trained in place: the server's copy does not change under it
        batches = [collector.next() for _ in range(3)]
        assert all(b is not None and (b["action"] == 1).all() and (b["policy_version"] == 0).all()
                   for b in batches)
        assert collector.policy is not policy
        collector.update_policy_weights_()  # now it does, between two forward passes
        later = [collector.next() for _ in range(4)]
        assert later[-1] is not None and (later[-1]["action"] == 0).all()
        assert (later[-1]["policy_version"] == 1).all()


def test_a_forward_pass_serves_the_waiting_workers_together() -> None:
    def run(**server: Any) -> float:
        with AsyncBatchedCollector(make_cartpole, TiltPolicy(), num_envs=4, envs_per_worker=2,
                                   frames_per_batch=2 * 10, total_frames=40 * 20, **server) as collector:
            assert len(list(collector)) == 40
            return collector.stats().inference_batch_size

    assert run(max_batch_size=2) == 2.0  # one worker's envs per pass, never more
    assert run(min_batch_size=4, server_timeout=0.05) > 3.0  # mostly both workers in one pass


class ThreadsSeen(torch.nn.Module):
    """CartPole's action 0, noting the torch threads of each thread that runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, int]] = set()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.seen.add((threading.current_thread().name, torch.get_num_threads()))
        return torch.zeros(obs.shape[0], dtype=torch.long)


def test_the_server_runs_one_torch_thread_and_leaves_the_collectors_threads_alone() -> None:
    """A thread of several torch threads per small op waits on the cores the env workers use
    (a served forward pass took 8 times longer); the server's setting is its thread's own."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with AsyncBatchedCollector(make_cartpole, ThreadsSeen(), num_envs=2, frames_per_batch=10,
                                   total_frames=40) as collector:
            assert len(list(collector)) == 4
            served = collector.policy
            assert torch.get_num_threads() == 2
        assert isinstance(served, ThreadsSeen)
        assert {n for name, n in served.seen if name == "rlcollect-policy-server"} == {1}
    finally:
        torch.set_num_threads(before)


def test_tensordict_policy_extras_are_written_into_the_batch() -> None:
    def act(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (obs[:, 2] > 0).long(), obs.sum(-1)

    policy = TensorDictModule(act, in_keys=["observation"], out_keys=["action", "sample_log_prob"])
    with AsyncBatchedCollector(make_cartpole, policy, num_envs=2, envs_per_worker=1, frames_per_batch=16,
                               total_frames=64, seed=0) as collector:
        batches = [b for b in collector if b is not None]
    assert len(batches) == 4
    for batch in batches:
        obs = batch["observation"]
        assert batch["sample_log_prob"].dtype == torch.float32
        assert torch.equal(batch["sample_log_prob"], obs.sum(-1))
        assert torch.equal(batch["action"], (obs[..., 2] > 0).long())


@pytest.mark.parametrize("groups", [1, 2])
def test_a_killed_worker_is_restarted_reconnected_and_no_frame_is_lost_or_repeated(groups: int) -> None:
    """``groups=2``: 2 envs a worker stepped one at a time (``env_groups=2``), every group reconnected."""
    env = functools.partial(CountingEnv, episode_length=50, step_sleep=0.01 / groups)
    collector = AsyncBatchedCollector(env, WeightedPolicy(), num_envs=2 * groups, envs_per_worker=groups,
                                      env_groups=groups, frames_per_batch=30, total_frames=8 * 30, seed=0,
                                      timeout=30)
    first = collector.next()
    assert first is not None and first.shape == (groups, 30 // groups)
    victim = collector.worker_pids[0]
    assert victim is not None
    timer = threading.Timer(0.1, os.kill, (victim, signal.SIGKILL))
    timer.start()
    with pytest.warns(RuntimeWarning, match="worker 0 failed .* restarting it with fresh envs"):
        rest = [b.clone() for b in collector if b is not None]
    timer.join()
    batches = [first, *rest]
    assert len(batches) == 8 and collector.stats().restarts == 1
    seen = torch.cat([b["observation"].reshape(-1, 2) for b in batches])  # [uid, step] per frame
    assert len({tuple(frame) for frame in seen.tolist()}) == len(seen) == 8 * 30
    actions = torch.cat([b["action"].reshape(-1) for b in batches])
    assert (actions == 1).all()  # every frame's action served (WeightedPolicy's), no zero left in a slot
    assert collector.worker_pids[0] != victim
    collector.shutdown()


class FailingPolicy(torch.nn.Module):
    """Raises at its ``fail_at``-th call (it runs in this process: the count is real)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.calls, self.fail_at = 0, fail_at

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ArithmeticError(f"policy broke at call {self.calls}")
        return torch.zeros(obs.shape[0], dtype=torch.long)


@pytest.mark.alone  # /dev/shm is the machine's: another case's entries would show
def test_a_failing_policy_is_raised_here_and_nothing_is_left_behind() -> None:
    before_children, before_shm = child_pids(), shm_entries()
    collector = AsyncBatchedCollector(make_cartpole, FailingPolicy(fail_at=30), num_envs=2,
                                      frames_per_batch=5, total_frames=1000)
    with pytest.raises(ArithmeticError, match="policy broke at call 30") as info, warnings.catch_warnings():
        warnings.simplefilter("error")  # no worker restart: the policy, not a worker, failed
        list(collector)
    assert any("policy server" in note for note in getattr(info.value, "__notes__", []))
    collector.shutdown()
    assert child_pids() <= before_children and shm_entries() <= before_shm


def test_start_up_time_is_reported() -> None:
    for cls, kwargs in ((AsyncBatchedCollector, {"num_envs": 2}), (MultiSyncCollector, {"num_workers": 2})):
        with cls(make_cartpole, TiltPolicy(), frames_per_batch=4, total_frames=8, **kwargs) as collector:
            assert collector.stats().startup_seconds != collector.stats().startup_seconds  # nan: not started
            list(collector)
            assert 0 < collector.stats().startup_seconds < 60


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"policy": None}, TypeError, "serves a policy: give policy or policy_factory"),
    ({"num_envs": 3, "envs_per_worker": 2}, ValueError, "num_envs=3 is not a multiple of envs_per_worker=2"),
    ({"envs_per_worker": 0}, ValueError, "envs_per_worker must be a positive int, got 0"),
    ({"num_envs": "4"}, TypeError, "num_envs must be a positive int, got '4' \\(str\\)"),
    ({"num_envs": np.int64(2), "envs_per_worker": np.int64(1)}, None, ""),  # numpy integers are ints
    ({"max_batch_size": 1, "envs_per_worker": 2}, ValueError, "max_batch_size must be None or an int >= "
                                                              "envs_per_worker=2, got 1"),
    ({"min_batch_size": 9}, ValueError, "min_batch_size=9 is more than the 4 envs"),
    ({"min_batch_size": 0}, ValueError, "min_batch_size must be a positive int, got 0"),
    ({"server_timeout": -1}, ValueError, "server_timeout must be a finite number of seconds >= 0, got -1"),
    ({"server_timeout": "1"}, TypeError, "server_timeout must be a number of seconds >= 0, got '1'"),
    ({"create_env_fn": [make_cartpole, make_cartpole, "CartPole-v1", make_cartpole], "envs_per_worker": 2},
     ValueError, r"create_env_fn\[2:4\] \(worker 1's envs\) are built from different sources"),
    ({"create_env_fn": [make_cartpole] * 3}, ValueError, "create_env_fn has 3 entries for num_envs=4"),
    ({"frames_per_batch": 0}, ValueError, "frames_per_batch must be a positive int, got 0"),
    ({"yield_completed_trajectories": True, "trajs_per_batch": 2}, ValueError,
     "give yield_completed_trajectories or trajs_per_batch, not both"),
    ({"env_groups": 0}, ValueError, "env_groups must be a positive int, got 0"),
    ({"env_groups": 3, "envs_per_worker": 2}, ValueError,
     "env_groups=3 does not divide envs_per_worker=2: each group has as many envs"),
    ({"env_groups": 2, "envs_per_worker": 4, "max_batch_size": 1}, ValueError,
     "max_batch_size must be None or an int >= envs_per_worker / env_groups = 2, got 1"),
    ({"env_groups": 2, "envs_per_worker": 2, "num_envs": 2, "create_env_fn": "envpool:CartPole-v1"},
     TypeError, "env_groups=2: a worker steps its envs in groups, which takes a list of Gymnasium envs"),
    ({"env_groups": 2, "envs_per_worker": 2}, None, ""),
])
def test_construction_errors_name_the_argument(kwargs: dict[str, Any], error: type | None,
                                                message: str) -> None:
    arguments: dict[str, Any] = {"create_env_fn": make_cartpole, "policy": TiltPolicy(), "num_envs": 4,
                                 "frames_per_batch": 8, **kwargs}
    before = child_pids()
    if error is None:
        AsyncBatchedCollector(**arguments).shutdown()
    else:
        with pytest.raises(error, match=message):
            AsyncBatchedCollector(**arguments)
    assert child_pids() <= before


def test_worker_ids_update_the_one_server_and_unknown_models_are_named() -> None:
    """As TorchRL's AsyncBatchedCollector: worker_ids update the server, which acts for them all."""
    with AsyncBatchedCollector(make_cartpole, WeightedPolicy(), num_envs=2, frames_per_batch=4) as collector:
        with pytest.raises(ValueError, match=r"worker 3 is out of range for num_workers=2"):
            collector.update_policy_weights_(WeightedPolicy(), worker_ids=[3])
        with pytest.raises(KeyError, match=r"unknown model id\(s\) \['critic'\]; known: \['policy'\]"):
            collector.update_policy_weights_(WeightedPolicy(), model_id="critic")
        assert collector.stats().policy_version == 0
        collector.update_policy_weights_(WeightedPolicy(scale=-2.0), worker_ids=[0])
        assert collector.stats().policy_version == 1
        assert collector.policy.scale.item() == -2.0
        batch = collector.next()
        assert batch is not None and (batch["action"] == 0).all()  # the new weights act for every env


def test_yield_completed_trajectories_gives_one_whole_episode_at_a_time() -> None:
    env = functools.partial(CountingEnv, episode_length=7)
    with AsyncBatchedCollector(env, WeightedPolicy(), num_envs=2, frames_per_batch=10, total_frames=60,
                               yield_completed_trajectories=True, seed=0) as collector:
        episodes = [b for b in collector if b is not None]
    assert episodes and all(e.batch_size == (7,) for e in episodes)
    for episode in episodes:
        assert episode["next", "done"][:, 0].tolist() == [False] * 6 + [True]
        assert episode["collector", "traj_ids"].unique().numel() == 1


def test_background_collection_into_a_shared_buffer_with_served_versions() -> None:
    """Workers write the shared buffer themselves; the versions the server stamped are in it."""
    buffer = ReplayBuffer(100_000, storage="shared")
    env = functools.partial(CountingEnv, episode_length=6, step_sleep=0.001)
    collector = AsyncBatchedCollector(env, WeightedPolicy(scale=1.0), num_envs=2, frames_per_batch=20, seed=0,
                                      replay_buffer=buffer)
    collector.start()
    deadline = time.monotonic() + 60
    while buffer.write_count < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    with collector.pause():
        held = buffer.write_count
        collector.update_policy_weights_(WeightedPolicy(scale=-1.0))  # action 0 from version 1 on
        time.sleep(0.3)
        assert buffer.write_count == held
    while buffer.write_count < held + 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    collector.async_shutdown(timeout=10)
    check_frames(buffer, buffer.write_count, [0, 1])
    data = buffer.data[: len(buffer)]
    assert set(data["policy_version"].tolist()) == {0, 1}
    assert torch.equal(data["action"], (data["policy_version"] == 0).long())


@pytest.mark.parametrize(("scheme", "moves"), [(MultiProcessWeightSyncScheme(), True),
                                               (NoWeightSyncScheme(), False)])
def test_weight_sync_schemes_apply_to_the_served_policy(scheme: Any, moves: bool) -> None:
    with AsyncBatchedCollector(make_cartpole, WeightedPolicy(scale=1.0), num_envs=2, frames_per_batch=10,
                               weight_sync=scheme) as collector:
        collector.next()
        collector.update_policy_weights_(WeightedPolicy(scale=-1.0))
        later = [collector.next() for _ in range(4)][-1]
        assert later is not None and (later["action"] == (0 if moves else 1)).all()
        assert collector.stats().policy_version == (1 if moves else 0)


@pytest.mark.alone  # /dev/shm is the machine's: another case's entries would show
def test_shutdown_with_a_hung_env_is_bounded_and_leaves_nothing() -> None:
    before_children, before_shm = child_pids(), shm_entries()
    collector = AsyncBatchedCollector(functools.partial(CountingEnv, hang_at=5), WeightedPolicy(), num_envs=2,
                                      frames_per_batch=4, timeout=60)
    assert collector.next() is not None
    workers = [pid for pid in collector.worker_pids if pid is not None]
    start = time.monotonic()
    collector.shutdown(timeout=1.0)
    assert time.monotonic() - start < 10
    assert not any(alive(pid) for pid in workers)
    assert child_pids() <= before_children and shm_entries() <= before_shm
