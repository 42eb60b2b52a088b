"""RayCollector on a local Ray (2 CPUs): equality with MultiSyncCollector, weights and versions,
restarts after a kill or an env error, the original error past the budget, async batches, a Ray
actor sink in the background, profiling, and shutdown leaving nothing behind.

Ray is started once for the module (about 10 s); each collector starts two actors (a few seconds
each on a busy 2-core machine), so each test builds one collector and checks several things on it.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

ray = pytest.importorskip("ray", reason="RayCollector needs ray: pip install rlcollect[ray]")
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: E402

from rlcollect import Collector, MultiSyncCollector  # noqa: E402
from rlcollect.distributed import RayCollector  # noqa: E402
from rlcollect.weights import NoWeightSyncScheme  # noqa: E402
from tests.envs_for_tests import (  # noqa: E402
    CountingEnv,
    EnvBroke,
    TiltPolicy,
    WeightedPolicy,
    assert_ids_label_trajectories,
    make_cartpole,
)

NUM_CPUS = 2


pytestmark = pytest.mark.usefixtures("ray_session")  # one local Ray (2 CPUs) for the module


def drop_ids(batch: TensorDictBase) -> TensorDictBase:
    return batch.exclude(("collector", "traj_ids"))


def assert_all_gone(pids: list[int]) -> None:
    """Every CPU is free again and no actor process is alive (Ray frees them asynchronously)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        if ray.available_resources().get("CPU", 0) == NUM_CPUS and not alive:
            return
        time.sleep(0.1)
    raise AssertionError(f"left behind: resources {ray.available_resources()}, live actor pids {alive}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class FailsOnceEnv(CountingEnv):
    """A :class:`CountingEnv` whose env seeded ``bad_uid`` raises at step 5, once per marker file."""

    def __init__(self, bad_uid: int, marker: str) -> None:
        super().__init__(episode_length=7)
        self.bad_uid, self.marker = bad_uid, marker

    def step(self, action: int) -> Any:
        if self.uid == self.bad_uid and self.total == 5 and not os.path.exists(self.marker):
            Path(self.marker).touch()
            raise EnvBroke(f"env {self.uid} broke")
        return super().step(action)


@ray.remote(num_cpus=0)
class Sink:
    """A replay-buffer stand-in in its own actor: counts and keeps the frames it is given."""

    def __init__(self) -> None:
        self.frames: list[TensorDictBase] = []

    def extend(self, frames: TensorDictBase) -> None:
        self.frames.append(frames)

    def count(self) -> int:
        return sum(f.numel() for f in self.frames)

    def all_frames(self) -> list[TensorDictBase]:
        return self.frames


@pytest.mark.timeout(150)
def test_sync_equals_multi_sync_and_resumes_from_state() -> None:
    with MultiSyncCollector(make_cartpole, TiltPolicy(), num_workers=2, num_envs_per_worker=2,
                            frames_per_batch=60, total_frames=180, seed=7) as multi:
        expected = list(multi)
    with RayCollector(make_cartpole, TiltPolicy(), num_collectors=2, collector_kwargs={"num_envs": 2},
                      frames_per_batch=60, seed=7) as collector:
        got = [collector.next() for _ in range(3)]
        for want, have in zip(expected, got, strict=True):
            assert want is not None and have is not None
            assert have.batch_size == (4, 15) and have.names == [None, "time"]
            assert (drop_ids(want) == drop_ids(have)).all()
        assert_ids_label_trajectories(got)

        state = collector.state_dict()
        later = [collector.next() for _ in range(2)]
        collector.load_state_dict(state)
        again = [collector.next() for _ in range(2)]
        for a, b in zip(later, again, strict=True):
            assert a is not None and b is not None and (a == b).all()

        assert collector.set_seed(7) == 7 + 4
        reseeded = collector.next()
        assert reseeded is not None and (drop_ids(reseeded) == drop_ids(expected[0])).all()
        stats = collector.stats()
        assert stats.frames == 6 * 60 and stats.batches == 6 and len(stats.workers) == 2
        assert [w.frames for w in stats.workers] == [180, 180]
        pids = list(collector.actor_pids)
    assert_all_gone(pids)


@pytest.mark.timeout(150)
def test_weights_reach_the_actors_with_their_version() -> None:
    # CountingEnv's reward is the action: the weights decide every reward
    policy = WeightedPolicy(scale=1.0)
    with RayCollector(functools.partial(CountingEnv, episode_length=5), policy, num_collectors=2,
                      collector_kwargs={"num_envs": 2, "models": {"offset": policy.offset}},
                      frames_per_batch=40, seed=0) as collector:
        first = collector.next()
        assert first is not None
        assert (first["next", "reward"] == 1).all() and (first["policy_version"] == 0).all()

        collector.update_policy_weights_(WeightedPolicy(scale=-1.0))  # a module
        second = collector.next()
        assert second is not None
        assert (second["next", "reward"] == 0).all() and (second["policy_version"] == 1).all()

        with torch.no_grad():
            policy.scale.fill_(2.0)
        collector.update_policy_weights_(worker_ids=[1])  # pulled from the policy given, actor 1 only
        third = collector.next()
        assert third is not None
        assert (third["next", "reward"][:2] == 0).all() and (third["policy_version"][:2] == 1).all()
        assert (third["next", "reward"][2:] == 1).all() and (third["policy_version"][2:] == 2).all()

        collector.update_policy_weights_(weights={"scale": torch.tensor(-3.0)})  # a dict of weights
        fourth = collector.next()
        assert fourth is not None and (fourth["next", "reward"] == 0).all()
        assert fourth["policy_version"][:2].unique().tolist() == [2]
        assert fourth["policy_version"][2:].unique().tolist() == [3]
        assert [w.policy_version for w in collector.stats().workers] == [2, 3]
        with pytest.raises(KeyError, match="unknown model id"):
            collector.update_policy_weights_(model_id="critic")
        # a rejected update changes nothing: 10 more batches with the same weights and versions
        with pytest.raises(ValueError, match=r"'scale' has shape \(2,\), the module's has \(\)"):
            collector.update_policy_weights_(weights={"scale": torch.ones(2)})
        for _ in range(10):
            batch = collector.next()
            assert batch is not None and (batch["next", "reward"] == 0).all()
            assert batch["policy_version"][:, 0].tolist() == [2, 2, 3, 3]
        assert type(collector.weight_sync_schemes["policy"]).__name__ == "RayWeightSyncScheme"
        # two models in one update, one version: scale 1 with offset -0.5 acts 1 (reward 1)
        collector.update_policy_weights_(weights_dict={"policy": {"scale": torch.tensor(1.0)},
                                                       "offset": {"bias": torch.tensor(-0.5)}})
        batch = collector.next()
        assert batch is not None and (batch["next", "reward"] == 1).all()
        assert batch["policy_version"][:, 0].tolist() == [3, 3, 4, 4]
        pids = list(collector.actor_pids)
    assert_all_gone(pids)
    # NoWeightSyncScheme: the actors keep the weights they started with
    with RayCollector(functools.partial(CountingEnv, episode_length=5), WeightedPolicy(scale=1.0),
                      num_collectors=2, collector_kwargs={"num_envs": 2}, frames_per_batch=40, seed=0,
                      weight_sync_schemes={"policy": NoWeightSyncScheme()}) as collector:
        collector.update_policy_weights_(WeightedPolicy(scale=-1.0))
        batch = collector.next()
        assert batch is not None and (batch["next", "reward"] == 1).all()
        assert (batch["policy_version"] == 0).all()
    # policy_factory at the top level, as TorchRL's RayCollector takes it: each actor builds its own
    factory = functools.partial(WeightedPolicy, scale=-1.0)
    with RayCollector(functools.partial(CountingEnv, episode_length=5), None, policy_factory=factory,
                      num_collectors=2, collector_kwargs={"num_envs": 2}, frames_per_batch=40,
                      seed=0) as collector:
        batch = collector.next()
        assert batch is not None and (batch["next", "reward"] == 0).all()
    with pytest.raises(ValueError, match="policy_factory was given twice"):
        RayCollector(make_cartpole, None, policy_factory=factory, num_collectors=1, frames_per_batch=8,
                     collector_kwargs={"policy_factory": factory})


class PidRecordingFactory:
    """Builds ``WeightedPolicy(scale=-1)`` (always action 0), appending the pid of each call to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self) -> torch.nn.Module:
        with open(self.path, "a") as file:
            file.write(f"{os.getpid()}\n")
        return WeightedPolicy(scale=-1.0)


def test_policy_factory_runs_in_the_actors_only(tmp_path: Path) -> None:
    """Without ``policy``, actor 0 builds the probe at construction while the other actors start:
    the factory runs once per actor and never in the driver; a collector closed before its first
    batch ends every actor it started."""
    calls = tmp_path / "calls"
    factory = PidRecordingFactory(calls)
    with RayCollector(functools.partial(CountingEnv, episode_length=5), None, policy_factory=factory,
                      num_collectors=2, collector_kwargs={"num_envs": 2}, frames_per_batch=40,
                      seed=0) as collector:
        assert len(calls.read_text().split()) == 1
        batch = collector.next()
        assert batch is not None and batch.shape == (4, 10) and (batch["action"] == 0).all()
        pids = [int(pid) for pid in calls.read_text().split()]
        assert sorted(pids) == sorted(collector.actor_pids) and os.getpid() not in pids
    assert_all_gone(pids)
    calls.unlink()
    collector = RayCollector(make_cartpole, None, policy_factory=factory, num_collectors=2,
                             frames_per_batch=8)
    (probe_pid,) = (int(pid) for pid in calls.read_text().split())
    # actor 1 started with actor 0 (its imports meanwhile) and waits for its setup: no factory call
    other_pid = _actor_process(collector.actors[1])
    assert other_pid not in (0, probe_pid, os.getpid())
    collector.shutdown()
    assert_all_gone([probe_pid, other_pid])


@pytest.mark.timeout(240)
def test_policy_factory_of_actors_that_run_worker_processes(tmp_path: Path) -> None:
    """collector_class=MultiSyncCollector with policy_factory alone: actor 0 builds the probe (its
    first process's envs, closed when its setup comes); the factory never runs in the driver."""
    calls = tmp_path / "calls"
    with RayCollector(make_cartpole, None, policy_factory=PidRecordingFactory(calls), num_collectors=2,
                      collector_class=MultiSyncCollector, collector_kwargs={"num_workers": 2},
                      remote_config={"num_cpus": 1}, frames_per_batch=40, seed=7) as collector:
        assert len(calls.read_text().split()) == 1  # actor 0's probe, at construction
        batch = collector.next()
        assert batch is not None and batch.batch_size == (4, 10) and (batch["action"] == 0).all()
        pids = {int(pid) for pid in calls.read_text().split()}
        assert os.getpid() not in pids and set(collector.actor_pids) <= pids and len(pids) >= 6


def _actor_process(actor: Any, timeout: float = 30.0) -> int:
    """The pid of ``actor``'s process, from Ray's actor table, once Ray started it."""
    state = __import__("ray._private.state", fromlist=["actors"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = int(state.actors(actor_id=actor._actor_id.hex()).get("Pid") or 0)
        if pid:
            return pid
        time.sleep(0.05)
    raise TimeoutError(f"Ray did not start actor {actor} within {timeout} s")


@pytest.mark.timeout(200)
def test_killed_actor_and_broken_env_are_restarted_and_collection_goes_on(tmp_path: Path) -> None:
    """A killed actor and an env that breaks once: both replaced in their placement-group bundles,
    with fresh seeds and ids, and the batches go on."""
    # env uids are their seeds: 100..103; env 102 (actor 1's first env) breaks once
    env = functools.partial(FailsOnceEnv, bad_uid=102, marker=str(tmp_path / "broke"))
    # each actor in its own bundle of a placement group that holds every CPU: a replacement can only
    # start in its predecessor's bundle
    group = placement_group([{"CPU": 1}] * NUM_CPUS, strategy="PACK")
    ray.get(group.ready(), timeout=30)
    bundles = [{"scheduling_strategy": PlacementGroupSchedulingStrategy(group, i)} for i in range(2)]
    with RayCollector(env, None, num_collectors=2, collector_kwargs={"num_envs": 2}, frames_per_batch=16,
                      seed=100, max_actor_restarts=2, prefetch=True, remote_config=bundles) as collector:
        batches = [collector.next()]
        killed_pid = collector.actor_pids[0]
        ray.kill(collector.actors[0], no_restart=False)  # prefetch: its next batch is under way
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batches += [collector.next() for _ in range(3)]
        assert sum("restarting it with fresh envs" in str(w.message) for w in caught) == 2, [
            str(w.message) for w in caught]
        # the death says Ray's reason, not only "The actor died unexpectedly"
        assert sum("The actor is dead because it was killed by `ray.kill`" in str(w.message)
                   for w in caught) == 1, [str(w.message) for w in caught]
        assert all(b is not None and b.batch_size == (4, 4) for b in batches)
        stats = collector.stats()
        assert stats.restarts == 2 and [w.restarts for w in stats.workers] == [1, 1]
        assert stats.frames == 4 * 16
        assert collector.actor_pids[0] != killed_pid
        # restarted actors continue with fresh seeds (next block: 100 + 4 envs) and fresh ids
        obs = torch.cat([b["observation"] for b in batches], 1)  # type: ignore[index]
        assert obs[:2, -1, 0].tolist() == [104.0, 105.0] and obs[2:, -1, 0].tolist() == [106.0, 107.0]
        ids = torch.cat([b["collector", "traj_ids"] for b in batches], 1)  # type: ignore[index]
        rows = {int(t): r for r in range(4) for t in ids[r].unique()}
        assert len(rows) == len(ids.unique())
        pids = list(collector.actor_pids) + [killed_pid]
    remove_placement_group(group)
    assert_all_gone(pids)


class ReplacementFailsOnceEnv(FailsOnceEnv):
    """Breaks once in a step (as :class:`FailsOnceEnv`); then the first env built after that fails
    to build, once: the replacement actor fails while it starts."""

    def __init__(self, bad_uid: int, marker: str) -> None:
        if os.path.exists(marker) and not os.path.exists(marker + ".built"):
            Path(marker + ".built").touch()
            raise OSError("the replacement's env could not be built")
        super().__init__(bad_uid, marker)


@pytest.mark.timeout(150)
def test_a_failure_while_the_replacement_starts_counts_one_restart(tmp_path: Path) -> None:
    """One actor: its env breaks, then its replacement fails while it starts: two restarts of the
    budget, and collection goes on; past the budget, the error names the actor, its node, every
    cause in order and max_actor_restarts."""
    env = functools.partial(ReplacementFailsOnceEnv, bad_uid=0, marker=str(tmp_path / "broke"))
    with RayCollector(env, None, num_collectors=1, frames_per_batch=4, total_frames=40, seed=0,
                      max_actor_restarts=2) as collector, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        batches = list(collector)
        assert collector.stats().restarts == 2 and len(batches) == 10
    env = functools.partial(ReplacementFailsOnceEnv, bad_uid=0, marker=str(tmp_path / "again"))
    collector = RayCollector(env, None, num_collectors=1, frames_per_batch=4, seed=0, max_actor_restarts=1)
    with pytest.raises(OSError, match="could not be built") as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in collector:
            pass
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "raised in rlcollect actor 0 on " in notes
    assert "past max_actor_restarts=1: 1. EnvBroke: env 0 broke; 2. OSError: the replacement's env" in notes


class SlowReplacementEnv(FailsOnceEnv):
    """Breaks once in a step (as :class:`FailsOnceEnv`); an env built after that takes 3 s to
    build: the replacement actor is slow to start."""

    def __init__(self, bad_uid: int, marker: str) -> None:
        if os.path.exists(marker):
            time.sleep(3.0)
        super().__init__(bad_uid, marker)


@pytest.mark.timeout(150)
def test_async_actors_keep_delivering_while_another_restarts(tmp_path: Path) -> None:
    """Async: actor 0's env breaks and its replacement takes 3 s to start; meanwhile actor 1's
    batches keep coming, and actor 0's own batches come back, from fresh envs, without a gap or a
    duplicate within any env."""
    env = functools.partial(SlowReplacementEnv, bad_uid=0, marker=str(tmp_path / "broke"))
    arrivals: list[tuple[float, int, TensorDictBase]] = []  # (time, actor, batch)
    with RayCollector(env, None, num_collectors=2, frames_per_batch=10, sync=False, seed=0,
                      max_actor_restarts=1) as collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deadline = time.monotonic() + 60
        for batch in collector:
            actor = int(batch["collector", "traj_ids"][0, 0]) % 2
            arrivals.append((time.monotonic(), actor, batch))
            if (actor == 0 and batch["observation"][0, 0, 0] == 2) or time.monotonic() > deadline:
                break  # the replacement's env (seeded 0 + 2) delivered
    restarted = [i for i, w in enumerate(caught) if "restarting it with fresh envs" in str(w.message)]
    assert len(restarted) == 1 and collector.stats().restarts == 1
    back = next(i for i, (_, actor, batch) in enumerate(arrivals)
                if actor == 0 and batch["observation"][0, 0, 0] == 2)
    during = [t for t, actor, _ in arrivals[:back] if actor == 1]  # actor 0 broke in its first batch
    assert len(during) >= 10, f"actor 1 delivered {len(during)} batches while actor 0 restarted"
    gaps = [later - earlier for earlier, later in itertools.pairwise(during)]
    print(f"actor 0 back after {arrivals[back][0] - arrivals[0][0]:.2f} s; actor 1's longest gap "
          f"meanwhile {max(gaps):.3f} s over {len(during)} batches")
    for actor in (0, 1):  # within each env: steps follow each other, episodes restart at 0
        steps = torch.cat([b["observation"][0, :, 1] for _, a, b in arrivals if a == actor])
        uids = torch.cat([b["observation"][0, :, 0] for _, a, b in arrivals if a == actor])
        for uid in uids.unique():
            counts = steps[uids == uid]
            follows = (counts[1:] == counts[:-1] + 1) | (counts[1:] == 0)
            assert bool(follows.all()) and counts[0] == 0, (actor, uid, counts.tolist())


@pytest.mark.timeout(150)
def test_a_stopped_actor_is_found_by_the_health_check_and_replaced() -> None:
    """An actor's process stopped (SIGSTOP) answers no health ping: found after health_timeout,
    named, and replaced (its stopped process killed), while the other actor keeps delivering; the
    batch timeout (120 s) plays no part."""
    with RayCollector(make_cartpole, None, num_collectors=2, frames_per_batch=10, sync=False, seed=0,
                      health_timeout=3.0) as collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collector.next()
        stopped = collector.actor_pids[0]
        os.kill(stopped, signal.SIGSTOP)
        began, actors = time.monotonic(), []
        while not any("health" in str(w.message) for w in caught) and time.monotonic() - began < 30:
            batch = collector.next()
            actors.append(int(batch["collector", "traj_ids"][0, 0]) % 2)
        found = time.monotonic() - began
        messages = [str(w.message) for w in caught if "health" in str(w.message)]
        assert len(messages) == 1 and 3.0 <= found < 8.0, (found, messages)
        assert ("actor 0 failed (its Ray actor answered no health check for health_timeout=3 s: its process "
                "or its node stopped answering (it ran on " in messages[0])
        assert "which is alive for Ray" in messages[0] and actors.count(1) >= 10
        while collector.actor_pids[0] == stopped or 0 not in actors[-20:]:
            batch = collector.next()
            actors.append(int(batch["collector", "traj_ids"][0, 0]) % 2)
        assert collector.stats().restarts == 1
    assert not _alive(stopped)  # Ray's kill leaves a stopped process: the collector killed it


@pytest.mark.timeout(150)
def test_a_spare_actor_takes_over_a_killed_one() -> None:
    """spare_actors=1: once the actor is up, a spare starts; when the actor is killed, the spare
    becomes its replacement (no interpreter start, no imports), and a new spare starts."""
    with RayCollector(make_cartpole, None, num_collectors=1, frames_per_batch=10, seed=0,
                      spare_actors=1) as collector, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        collector.next()
        transport = collector._pool.transport
        deadline = time.monotonic() + 60
        while not (transport._spares and ray.wait([transport._spares[0][1]], timeout=0)[0]):
            assert time.monotonic() < deadline, "the spare did not start"
            time.sleep(0.1)
        spare = transport._spares[0][0]
        killed = collector.actor_pids[0]
        began = time.monotonic()
        os.kill(killed, signal.SIGKILL)
        batch = collector.next()
        print(f"back after {time.monotonic() - began:.2f} s with the spare")
        assert batch is not None and collector.actors[0] is spare and collector.actor_pids[0] != killed
        assert collector.stats().restarts == 1
        while not transport._spares:  # a new spare once the replacement is up
            assert time.monotonic() < deadline, "no new spare"
            collector.next()
    assert_all_gone([killed, *collector.actor_pids])


@pytest.mark.timeout(120)
def test_async_batches_then_past_the_restart_budget_the_original_error_is_raised() -> None:
    env = functools.partial(CountingEnv, fail_at=40)  # each actor's 5th batch of 10 steps fails
    collector = RayCollector(env, None, num_collectors=2, frames_per_batch=10, sync=False, seed=0,
                             max_actor_restarts=0)
    batches: list[TensorDictBase] = []
    with pytest.raises(EnvBroke, match="broke at step 40") as info:
        for batch in collector:
            assert batch is not None
            batches.append(batch)
    assert isinstance(info.value, EnvBroke)
    assert "envs_for_tests.py" in "".join(getattr(info.value, "__notes__", []))  # the actor's traceback
    pids = list(collector.actor_pids)  # the actors' processes, kept after the shutdown
    assert 4 <= len(batches) <= 8 and all(b.batch_size == (1, 10) for b in batches)
    # (which actors the batches came from is not asserted: under load one actor may deliver its
    # 4 batches and fail before the other's first batch arrives)
    assert_all_gone(pids)  # iteration failing shut the collector down


@pytest.mark.timeout(150)
def test_background_collection_into_a_ray_sink_with_pause_and_profiling(tmp_path: Path) -> None:
    sink = Sink.remote()  # type: ignore[attr-defined]
    collector = RayCollector(make_cartpole, TiltPolicy(), num_collectors=2, collector_kwargs={"num_envs": 2},
                             frames_per_batch=20, sync=False, replay_buffer=sink, seed=0)
    collector.enable_profile(workers=[1], num_rollouts=2, warmup_rollouts=1,
                             save_path=tmp_path / "trace_{worker_idx}.json", with_stack=False)
    assert collector.next() is None  # the actor wrote it (and the others go on: async)
    assert ray.get(sink.count.remote()) >= 20
    collector.start()
    deadline = time.monotonic() + 30
    while ray.get(sink.count.remote()) < 400 and time.monotonic() < deadline:
        time.sleep(0.05)
    with collector.pause():
        held = ray.get(sink.count.remote())
        time.sleep(0.3)
        assert ray.get(sink.count.remote()) == held
    while ray.get(sink.count.remote()) <= held and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.get(sink.count.remote()) > held
    pids = list(collector.actor_pids)
    collector.async_shutdown()
    assert_all_gone(pids)
    frames = ray.get(sink.all_frames.remote())
    assert {f.batch_size for f in frames} == {torch.Size([20])}  # one actor's [2, 10], flat
    actors = {int(f["collector", "traj_ids"][0]) % 2 for f in frames}
    assert actors == {0, 1}
    assert (tmp_path / "trace_1.json").exists() and not (tmp_path / "trace_0.json").exists()
    ray.kill(sink)


@pytest.mark.timeout(120)
def test_an_actor_waiting_for_cpus_is_named_with_what_it_asks_for() -> None:
    """Actors that run 2 worker processes ask for 2 CPUs each: on 2 CPUs the second one waits, and
    the time-out says for what, against what the cluster has free."""
    collector = RayCollector(make_cartpole, None, num_collectors=2, collector_class=MultiSyncCollector,
                             collector_kwargs={"num_workers": 2}, frames_per_batch=40, start_timeout=10)
    with pytest.raises(TimeoutError, match=r"did not start within start_timeout=10(\.0)? s: its Ray actor "
                       r"waits for resources: it asks for \{'CPU': 2\.0\}.*\{'CPU': '0 free of 2'\}"):
        collector.next()
    collector.shutdown()


def _slow_in_actors(driver: int, seconds: float) -> Any:
    """CartPole, built after ``seconds`` in any process but the driver's (its probe is not slowed)."""
    if os.getpid() != driver:
        time.sleep(seconds)
    return make_cartpole()


@pytest.mark.timeout(120)
def test_an_actor_placed_but_slow_to_start_is_not_said_to_wait_for_resources() -> None:
    """An actor whose envs take longer than start_timeout to build holds its CPU meanwhile, so the
    cluster has none free: the time-out says it was placed, not that it waits for resources."""
    env = functools.partial(_slow_in_actors, os.getpid(), 30.0)
    collector = RayCollector(env, None, num_collectors=2, frames_per_batch=20, start_timeout=10)
    with pytest.raises(TimeoutError, match=r"did not start within start_timeout=10(\.0)? s: Ray placed its "
                       r"actor \(its process runs\), which did not answer") as raised:
        collector.next()
    assert "waits for resources" not in str(raised.value)
    collector.shutdown()


@pytest.mark.timeout(240)
def test_one_actor_per_node_running_worker_processes() -> None:
    """collector_class=MultiSyncCollector: each actor runs 2 worker processes; the batches equal one
    process's with the same 4 envs, ids stay unique, and an update reaches the innermost policies."""
    with Collector(make_cartpole, TiltPolicy(), num_envs=4, frames_per_batch=40, seed=7) as single:
        expected = [single.next() for _ in range(2)]
    policy = TiltPolicy()
    with RayCollector(make_cartpole, policy, num_collectors=2, collector_class=MultiSyncCollector,
                      collector_kwargs={"num_workers": 2, "num_envs_per_worker": 1},
                      remote_config={"num_cpus": 1}, frames_per_batch=40, seed=7) as collector:
        got = [collector.next() for _ in range(2)]
        for want, have in zip(expected, got, strict=True):
            assert want is not None and have is not None and have.batch_size == (4, 10)
            assert (drop_ids(want) == drop_ids(have)).all()
        assert_ids_label_trajectories(got)  # type: ignore[arg-type]
        owners = {int(t) % 4 for b in got for t in b["collector", "traj_ids"][:, 0]}  # type: ignore[index]
        assert owners == {0, 1, 2, 3}  # worker k of actor a labels ids (a * 2 + k) mod 4
        with torch.no_grad():
            policy.weight.mul_(-1)  # the opposite pushes: every action flips
        collector.update_policy_weights_()
        third = collector.next()
        assert third is not None and (third["policy_version"] == 1).all()
        flipped = (third["observation"] @ -TiltPolicy().weight.detach() > 0).long()
        assert torch.equal(third["action"], flipped)  # the new weights chose every action
        pids = list(collector.actor_pids)
    assert_all_gone(pids)


@pytest.mark.timeout(180)
def test_torchrl_ray_collector_takes_torchrl_arguments() -> None:
    """rlcollect.torchrl.RayCollector: TorchRL's defaults (sync=False) and its top-level arguments
    for the actors' collectors (max_frames_per_traj, num_workers_per_collector, remote_configs)."""
    from rlcollect.torchrl import RayCollector as TorchRLRayCollector

    with pytest.raises(ValueError, match="remote_config lists 3 dicts for num_collectors=2"):
        TorchRLRayCollector(make_cartpole, num_collectors=2, frames_per_batch=8,
                            remote_configs=[{"num_cpus": 1}, {"num_cpus": 2}, {}])
    with TorchRLRayCollector(make_cartpole, TiltPolicy(), num_collectors=1, frames_per_batch=16,
                             total_frames=32, max_frames_per_traj=4, num_workers_per_collector=2, seed=0,
                             remote_configs=[{"num_cpus": 1}], update_after_each_batch=True,
                             use_env_creator=False) as collector:
        assert not collector.sync and collector.num_envs == 2
        batches = list(collector)
        # TorchRL's remote helpers over rlcollect's call_workers: each actor answers
        assert collector.get_distant_attr("worker_idx") == collector.call_workers("worker_idx") == [0]
        assert collector.map_fn("get_distant_attr", [("frames_per_batch",)]) == [16]
    assert [b.numel() for b in batches] == [16, 16]
    for batch in batches:
        assert torch.equal(batch["action"], TiltPolicy()(batch["observation"]))
        truncated = batch["next", "truncated"].reshape(2, 8)
        assert truncated[:, 3::4].all() and truncated.sum() == 4  # every 4th step ends the episode


@pytest.mark.timeout(120)
def test_a_policy_edited_in_place_and_never_sent_warns_once() -> None:
    """The actors act with the weights they were sent, as worker processes do; a policy you edit
    in place and never send is said once (StaleWeightsWarning), and its frames keep version 0."""
    from rlcollect.weights import StaleWeightsWarning

    policy = TiltPolicy()
    with RayCollector(make_cartpole, policy, num_collectors=2, frames_per_batch=8, total_frames=8 * 12,
                      seed=0) as collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions = set()
        for batch in collector:
            versions |= set(batch["policy_version"].unique().tolist())
            with torch.no_grad():
                policy.weight.mul_(-1)  # a learner's step, never sent
    stale = [w for w in caught if w.category is StaleWeightsWarning]
    assert len(stale) == 1 and stale[0].filename == __file__
    assert versions == {0}
