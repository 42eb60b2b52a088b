"""Multi-process collectors: equality with the single-process one, exactly-once delivery,
weights, preemption, shutdown without leaks, arguments. Faults (a killed worker, env errors,
hangs, start-up failures, errors in the user's loop, signals, a killed parent) are the fault
matrix's: tests/reliability/test_fault_matrix.py (it uses this module's helpers).

Workers are spawned (each imports torch), so each test builds few of them on tiny batches.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from rlcollect.collectors import ray_collector
from tests.envs_for_tests import (
    CountingEnv,
    Offset,
    TiltPolicy,
    WeightedPolicy,
    make_cartpole,
)

pytestmark = pytest.mark.timeout(90)


def child_pids() -> set[int]:
    """Live children of this process, read from /proc (not multiprocessing's resource tracker,
    which starts with the first shared-memory allocation and lives as long as this process)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"resource_tracker" not in command:
                pids.add(int(entry))
    return pids


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def drop_ids(batch: TensorDictBase) -> TensorDictBase:
    return batch.exclude(("collector", "traj_ids"))


def test_sync_equals_single_process_with_the_same_envs() -> None:
    single = Collector(make_cartpole, TiltPolicy(), frames_per_batch=4 * 15, num_envs=4, seed=7)
    expected = [single.next() for _ in range(4)]
    with MultiSyncCollector(make_cartpole, TiltPolicy(), num_workers=2, num_envs_per_worker=2,
                            frames_per_batch=4 * 15, total_frames=4 * 60, seed=7) as multi:
        got = list(multi)
    assert len(got) == 4
    for want, have in zip(expected, got, strict=True):
        assert want is not None and have is not None
        assert (drop_ids(want) == drop_ids(have)).all()
    ids = torch.cat(got, dim=1)["collector", "traj_ids"]  # type: ignore[arg-type]
    done = torch.cat(got, dim=1)["next", "done"][..., 0]  # type: ignore[arg-type]
    assert torch.equal(ids[:, 1:] != ids[:, :-1], done[:, :-1])
    rows = {int(t): r for r in range(4) for t in ids[r].unique()}
    assert len(rows) == len(ids.unique())  # no id in two rows


def test_async_delivers_every_frame_exactly_once() -> None:
    env = functools.partial(CountingEnv, episode_length=5)
    with MultiAsyncCollector(env, None, num_workers=2, num_envs_per_worker=2, frames_per_batch=12,
                             total_frames=120, seed=100) as collector:
        batches = list(collector)
    assert len(batches) == 10 and all(b.shape == (2, 6) for b in batches)  # type: ignore[union-attr]
    data = torch.cat([b.reshape(-1) for b in batches])  # type: ignore[union-attr]
    uid, step = data["observation"][:, 0].long(), data["observation"][:, 1].long()
    for env_uid in uid.unique().tolist():
        steps = step[uid == env_uid].sort().values
        assert torch.equal(steps, torch.arange(len(steps)))  # no frame lost, none twice
    assert sorted(uid.unique().tolist()) == [100, 101, 102, 103]
    owners: dict[int, int] = {}
    for traj, env_uid in zip(data["collector", "traj_ids"].tolist(), uid.tolist(), strict=True):
        assert owners.setdefault(traj, env_uid) == env_uid  # ids never collide across envs


def test_weights_reach_the_workers_with_their_version() -> None:
    policy = WeightedPolicy(scale=1.0)
    with MultiSyncCollector("CartPole-v1", policy, num_workers=2, frames_per_batch=8,
                            models={"offset": policy.offset}) as collector:
        first = collector.next()
        assert first is not None and (first["action"] == 1).all()
        assert (first["policy_version"] == 0).all()
        # an update of two models at once: each alone would keep action 1, both give 0
        collector.update_policy_weights_(weights_dict={
            "policy": TensorDict({"scale": torch.tensor(0.4)}),
            "offset": Offset(-0.6),
        })
        second = collector.next()
        assert second is not None and (second["action"] == 0).all()
        assert (second["policy_version"] == 1).all()
        # worker 1 only: its rows change, worker 0's keep the old weights and version
        collector.update_policy_weights_(WeightedPolicy(scale=5.0, offset=0.0), worker_ids=[1])
        third = collector.next()
        assert third is not None
        assert (third["action"][0] == 0).all() and (third["action"][1] == 1).all()
        assert third["policy_version"][:, 0].tolist() == [1, 2]
        # no argument: pull from the policy given at construction
        with torch.no_grad():
            policy.scale.fill_(3.0)
            policy.offset.bias.fill_(0.0)
        collector.update_policy_weights_()
        fourth = collector.next()
        assert fourth is not None and (fourth["action"] == 1).all()
        message = r"unknown model id\(s\) \['critic'\]; known: \['policy', 'offset'\]"
        with pytest.raises(KeyError, match=message):
            collector.update_policy_weights_(policy, model_id="critic")
        assert collector.stats().policy_version == 3


def test_prefetch_lags_one_version_and_update_at_each_batch() -> None:
    policy = WeightedPolicy(scale=1.0)
    with MultiSyncCollector("CartPole-v1", policy, num_workers=2, frames_per_batch=4, prefetch=True,
                            total_frames=16) as collector:
        seen = []
        for index, batch in enumerate(collector):
            assert batch is not None
            seen.append(batch["policy_version"].unique().tolist())
            # batch i was requested after i - 1 updates: the worker used that version or a newer one
            assert all(index - 1 <= v <= index for v in seen[-1]), seen
            collector.update_policy_weights_()
    assert len(seen) == 4
    with MultiSyncCollector("CartPole-v1", policy, num_workers=2, frames_per_batch=4,
                            update_at_each_batch=True, total_frames=12) as collector:
        assert [int(b["policy_version"].max()) for b in collector] == [1, 2, 3]  # type: ignore[index]


def test_preemption_masks_the_late_worker() -> None:
    slow = functools.partial(CountingEnv, episode_length=1000, step_sleep=0.05)
    fast = functools.partial(CountingEnv, episode_length=1000)
    with MultiSyncCollector([fast, slow], None, frames_per_batch=2 * 40, preemptive_threshold=0.5,
                            total_frames=160, seed=0) as collector:
        batches = list(collector)
    for batch in batches:
        assert batch is not None
        mask = batch["collector", "mask"]
        assert mask[0].all() and not mask[1].all()  # the slow worker was cut short
        kept = int(mask[1].sum())
        assert mask[1, :kept].all()  # its frames are a prefix
        assert (batch["collector", "traj_ids"][1, kept:] == -1).all()
    assert collector.stats().frames == sum(int(b["collector", "mask"].sum()) for b in batches)  # type: ignore[index]


def test_preemption_at_zero_stops_every_worker_at_once() -> None:
    """preemptive_threshold=0: as in TorchRL 0.14, none has to finish: every worker stops after
    its first step (a batch has one step at least)."""
    slow = functools.partial(CountingEnv, episode_length=1000, step_sleep=0.05)
    with MultiSyncCollector([slow, slow, slow], None, frames_per_batch=3 * 40, preemptive_threshold=0.0,
                            seed=0) as collector:
        assert collector.preemptive_threshold == 0.0
        batch = collector.next()
    assert batch is not None
    mask = batch["collector", "mask"]
    assert mask[:, 0].all() and not mask[:, 2:].any()  # one step, or two where the flag came late


def test_preemption_counts_workers_as_torchrl_does() -> None:
    """int(threshold * workers) must finish: 0.9 of 2 workers is 1, so the slow one is stopped
    (a rounded-up count, 2, would wait for it); 1.0 stops none."""
    slow = functools.partial(CountingEnv, episode_length=1000, step_sleep=0.05)
    fast = functools.partial(CountingEnv, episode_length=1000)
    for threshold, cut in ((0.9, True), (1.0, False)):
        with MultiSyncCollector([fast, slow], None, frames_per_batch=2 * 20, preemptive_threshold=threshold,
                                seed=0) as collector:
            batch = collector.next()
        assert batch is not None
        mask = batch["collector", "mask"]
        assert mask[0].all() and bool(mask[1].all()) is not cut


def test_seed_state_dict_and_stats() -> None:
    kwargs: dict[str, Any] = dict(num_workers=2, frames_per_batch=20, seed=3)
    with MultiSyncCollector(make_cartpole, None, **kwargs) as a:
        assert a.set_seed(3) == 5
        first = [a.next() for _ in range(2)]
        state = a.state_dict()
        expected = [a.next() for _ in range(2)]
        stats = a.stats()
    assert stats.frames == 80 and stats.batches == 4 and len(stats.workers) == 2
    assert stats.episodes == sum(w.episodes for w in stats.workers)
    with MultiSyncCollector(make_cartpole, None, **{**kwargs, "seed": 99}) as b:
        b.load_state_dict(state)
        resumed = [b.next() for _ in range(2)]
    for want, have in zip(expected, resumed, strict=True):
        assert want is not None and have is not None and (want == have).all()
    assert first[0] is not None and not (first[0]["observation"] == expected[0]["observation"]).all()  # type: ignore[index]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["async", "batched"])
def test_set_seed_drops_the_batch_collected_ahead_so_the_next_ones_are_a_seeded_collectors(kind: str) -> None:
    """An asynchronous worker collects its next batch while the last one is used: ``set_seed(5)``
    drops it (not counted) and the batches after it are those of a new collector seeded 5, as on
    TorchRL's asynchronous collectors (its suite's ``test_concurrent_collector_seed``)."""
    def build(seed: int) -> Any:
        if kind == "async":
            return MultiAsyncCollector(make_cartpole, TiltPolicy(), num_workers=1, frames_per_batch=16,
                                       seed=seed)
        return AsyncBatchedCollector(make_cartpole, TiltPolicy(), num_envs=2, envs_per_worker=2,
                                     frames_per_batch=16, seed=seed)  # one worker: its batches in order

    with build(5) as fresh:
        expected = [fresh.next().clone() for _ in range(3)]  # type: ignore[union-attr]
    with build(0) as collector:
        first = collector.next().clone()
        collector.set_seed(5)
        got = [collector.next().clone() for _ in range(3)]
        stats = collector.stats()
    assert not (drop_ids(first) == drop_ids(expected[0])).all()  # seed 0's batch is another
    for want, have in zip(expected, got, strict=True):
        assert (drop_ids(want) == drop_ids(have)).all()
    assert stats.frames == 4 * 16 and stats.batches == 4  # the dropped batch is not counted


def test_profile_traces_only_chosen_workers(tmp_path: Path) -> None:
    with MultiSyncCollector("CartPole-v1", TiltPolicy(), num_workers=2, frames_per_batch=8,
                            total_frames=32) as collector:
        collector.enable_profile(workers=[1], num_rollouts=2, warmup_rollouts=1,
                                 save_path=tmp_path / "w{worker_idx}.json", with_stack=False)
        list(collector)
    assert (tmp_path / "w1.json").exists() and not (tmp_path / "w0.json").exists()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not): a worker is this process's child when
    forked, a forkserver's otherwise."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.alone  # /dev/shm is the machine's: another case's entries would show
def test_no_child_process_or_shared_memory_left_after_shutdown() -> None:
    before_children, before_shm = child_pids(), shm_entries()
    collector = MultiSyncCollector("CartPole-v1", TiltPolicy(), num_workers=2, frames_per_batch=8,
                                   total_frames=16, prefetch=True)
    threads = torch.get_num_threads()
    assert len(list(collector)) == 2
    workers = [pid for pid in collector.worker_pids if pid is not None]
    assert len(workers) == 2 and all(alive(pid) for pid in workers)
    collector.shutdown()
    collector.shutdown()  # idempotent
    assert not any(alive(pid) for pid in workers)
    assert child_pids() <= before_children
    assert shm_entries() <= before_shm
    assert torch.get_num_threads() == threads  # workers set their own; this process's is untouched


def test_construction_errors_name_the_argument() -> None:
    lock = threading.Lock()

    def unpicklable_env() -> Any:
        assert lock is not None
        return CountingEnv()

    with pytest.raises(TypeError, match=r"create_env_fn\[0\] .* cannot be sent to a worker process"):
        MultiSyncCollector(unpicklable_env, None, num_workers=2, frames_per_batch=8)
    with pytest.raises(ValueError, match="num_workers is required unless create_env_fn is a list"):
        MultiSyncCollector("CartPole-v1", None, frames_per_batch=8)
    with pytest.raises(ValueError, match=r"preemptive_threshold must be .*in \[0, 1\] or None, got 1.5"):
        MultiSyncCollector("CartPole-v1", None, num_workers=2, frames_per_batch=8, preemptive_threshold=1.5)
    with pytest.raises(ValueError, match="start_method='thread' is not one of"):
        MultiSyncCollector("CartPole-v1", None, num_workers=2, frames_per_batch=8, start_method="thread")
    with pytest.raises(ValueError, match="create_env_kwargs has 3 entries for num_workers=2"):
        MultiSyncCollector("CartPole-v1", None, num_workers=2, frames_per_batch=8,
                           create_env_kwargs=[{}, {}, {}])
    for name in ("timeout", "start_timeout"):
        for bad, error in ((0, ValueError), (-1.5, ValueError), (float("inf"), ValueError), (True, TypeError),
                           ("5", TypeError), (None, TypeError)):
            with pytest.raises(error, match=rf"{name} must be a positive number of seconds, got {bad!r}"):
                MultiSyncCollector("CartPole-v1", None, num_workers=2, frames_per_batch=8, **{name: bad})
    with pytest.raises(ValueError, match=r"the policy's action does not fit"):
        MultiSyncCollector("CartPole-v1", lambda obs: obs, num_workers=2, frames_per_batch=8)


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector, AsyncBatchedCollector])
def test_start_timeout_bounds_starts_and_timeout_commands(cls: type) -> None:
    """``start_timeout`` (a numpy number too) reaches the pool for starts and restarts, apart from
    ``timeout``; every collector with workers takes it, with the same tolerant default."""
    kwargs = {"num_envs": 2} if cls is AsyncBatchedCollector else {"num_workers": 2}
    collector = cls("CartPole-v1", TiltPolicy(), frames_per_batch=8, timeout=np.float32(5),
                    start_timeout=np.int64(300), **kwargs)
    assert (collector._pool.timeout, collector._pool.start_timeout) == (5.0, 300.0)
    collector.shutdown()
    with cls("CartPole-v1", TiltPolicy(), frames_per_batch=8, **kwargs) as collector:  # the default
        assert collector._pool.start_timeout == 120.0
    assert inspect.signature(RayCollector).parameters["start_timeout"].default == 120.0
    assert "start_timeout" in ray_collector._RESERVED  # not settable per actor


def test_policy_factory_and_per_worker_env_kwargs() -> None:
    with MultiAsyncCollector([make_cartpole, make_cartpole], policy_factory=TiltPolicy,
                             frames_per_batch=6, total_frames=12, seed=1,
                             create_env_kwargs=[{}, {}]) as collector:
        batches = list(collector)
    assert len(batches) == 2
    for batch in batches:
        assert batch is not None
        expected = TiltPolicy()(batch["observation"])
        assert torch.equal(batch["action"], expected)
    np.testing.assert_equal(len(collector.worker_pids), 2)


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_workers_whose_envs_have_other_spaces_are_an_error_naming_them(cls: type) -> None:
    """CartPole in worker 0, Acrobot in worker 1: one batch cannot hold both (it was a bare torch
    error from inside the loop, after max_worker_restarts restarts)."""
    import gymnasium as gym

    with pytest.raises(ValueError, match=r"worker 1's envs do not fit the first worker's batches "
                                         r"\(observation: \[6\] torch.float32 where the batch holds \[4\]"):
        cls([make_cartpole, lambda: gym.make("Acrobot-v1")], frames_per_batch=8, total_frames=8).next()


class NaNOnceEnv(CountingEnv):
    """A :class:`CountingEnv` whose 5th step returns NaN observations, in the first process to step
    that far only (``flag`` is created then): the bad value of a flaky simulator."""

    def __init__(self, flag: str) -> None:
        super().__init__()
        self.flag, self.steps = flag, 0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.steps == 5:
            try:
                os.close(os.open(self.flag, os.O_CREAT | os.O_EXCL))
                obs = np.full_like(obs, np.nan)
            except FileExistsError:
                pass
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_bad_data_in_a_worker_is_a_failure_never_a_frame(cls: type, tmp_path: Path) -> None:
    """A NaN observation in a worker: the warning names it, the worker restarts, no frame holds it;
    with max_worker_restarts=0 the BadDataError itself reaches the caller."""
    from rlcollect.data.checks import BadDataError

    make = functools.partial(NaNOnceEnv, str(tmp_path / "restarting"))
    with pytest.warns(RuntimeWarning, match=r"worker [01] failed \(the observation of env [01] at step 4 of "
                                            r"batch 0 is \[nan, nan\], not finite\); restarting"), \
            cls(make, num_workers=2, frames_per_batch=16, total_frames=64, seed=0) as collector:
        observations = torch.cat([batch["observation"].flatten() for batch in collector])
    assert observations.numel() >= 64 and not observations.isnan().any()
    assert collector.stats().restarts == 1
    make = functools.partial(NaNOnceEnv, str(tmp_path / "raising"))
    with cls(make, num_workers=2, frames_per_batch=16, total_frames=64, max_worker_restarts=0) as collector, \
            pytest.raises(BadDataError, match=r"the observation of env [01] at step 4 of batch 0 is \[nan"):
        list(collector)


def test_a_rejected_weight_update_changes_nothing_and_collection_goes_on() -> None:
    with MultiSyncCollector("CartPole-v1", WeightedPolicy(scale=1.0), num_workers=2, frames_per_batch=8,
                            seed=0, timeout=20) as collector:
        first = collector.next()
        assert first is not None and (first["action"] == 1).all()
        with pytest.raises(ValueError, match=r"'scale' has shape \(3,\), the module's has \(\)"):
            collector.update_policy_weights_(weights={"scale": torch.zeros(3)})
        with pytest.raises(KeyError, match="bogus"):
            collector.update_policy_weights_(weights={"bogus": torch.zeros(1)})
        for _ in range(10):  # no hang, no torn store: the old weights and version keep collecting
            batch = collector.next()
            assert batch is not None and (batch["action"] == 1).all() and (batch["policy_version"] == 0).all()


@pytest.mark.parametrize("start_method", ["spawn", "forkserver", "fork"])
def test_every_start_method_gives_the_batches_of_auto(start_method: str) -> None:
    def batches(method: str) -> list[TensorDictBase]:
        with MultiSyncCollector(make_cartpole, TiltPolicy(), num_workers=2, frames_per_batch=8,
                                total_frames=24, seed=1, start_method=method) as collector:
            return [b.clone() for b in collector if b is not None]

    assert all((a == b).all() for a, b in zip(batches("auto"), batches(start_method), strict=True))


AUTO_START = """
import threading
from rlcollect import MultiSyncCollector
from rlcollect.workers.transport import fork_is_safe
from tests.collectors.test_multi import child_pids

def parents():
    with MultiSyncCollector("CartPole-v1", None, num_workers=2, frames_per_batch=4) as collector:
        collector.next()
        return "forked" if set(collector.worker_pids) <= child_pids() else "forkserver"

stop = threading.Event()
print(fork_is_safe(), parents())
other = threading.Thread(target=stop.wait)
other.start()
print(fork_is_safe(), parents())
stop.set()
"""


def test_auto_forks_only_without_other_threads() -> None:
    """``start_method="auto"``: workers are forked children of a process without other threads,
    and a forkserver's children otherwise (in a fresh interpreter: this one may run threads)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", AUTO_START], capture_output=True, text=True, timeout=80,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True forked", "False forkserver"]


def coin(obs: torch.Tensor) -> torch.Tensor:
    return torch.randint(0, 2, (obs.shape[0],))


def test_unseeded_workers_draw_different_numbers() -> None:
    """Forked workers start with this process's torch generator: unseeded, each draws its own."""
    with MultiSyncCollector(make_cartpole, coin, num_workers=2, frames_per_batch=2 * 64,
                            total_frames=2 * 64) as collector:
        batch = collector.next()
    assert batch is not None and not torch.equal(batch["action"][0], batch["action"][1])
