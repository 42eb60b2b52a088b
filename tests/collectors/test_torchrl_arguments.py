"""TorchRL's own collector arguments on rlcollect.torchrl's collectors: the same data, regrouped
or written as TorchRL does (cat_results is tested against TorchRL in tests/interop)."""

from __future__ import annotations

import threading

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect import Collector
from rlcollect import MultiAsyncCollector as NativeMultiAsync
from rlcollect import MultiSyncCollector as NativeMultiSync
from rlcollect.data.formats import BatchShape
from rlcollect.torchrl import Collector as TorchRLLayoutCollector
from rlcollect.torchrl import TorchRLLayout
from rlcollect.torchrl.translate import GroupWorkers
from tests.envs_for_tests import TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(60)


class ListSink:
    def __init__(self) -> None:
        self.items: list[TensorDictBase] = []

    def extend(self, frames: TensorDictBase) -> None:
        self.items.append(frames.clone())


def native_batch() -> TensorDictBase:
    with Collector(make_cartpole, TiltPolicy(), num_envs=3, frames_per_batch=12, total_frames=12,
                   seed=1) as collector:
        batch = next(iter(collector))
    assert batch is not None
    return batch


@pytest.mark.parametrize("extend_buffer", [True, False])
def test_extend_buffer_false_writes_step_by_step(extend_buffer: bool) -> None:
    """extend_buffer=True: env by env (each env's steps); False: step by step (every env's frame
    of a step, then the next), as TorchRL writes frames one step at a time."""
    sink = ListSink()
    with TorchRLLayoutCollector(make_cartpole, TiltPolicy(), num_envs=3, frames_per_batch=12, total_frames=12,
                                seed=1, replay_buffer=sink, extend_buffer=extend_buffer) as collector:
        assert list(collector) == [None]
    (frames,) = sink.items
    native = native_batch()
    order = native if extend_buffer else native.transpose(0, 1)
    assert frames.batch_size == (12,)
    assert torch.equal(frames["observation"], order["observation"].reshape(12, 4))
    assert torch.equal(frames["next", "reward"], order["next", "reward"].reshape(12, 1))
    assert not frames["done"].any()  # TorchRL's layout


def test_init_random_frames_minus_one_and_use_buffers_are_accepted() -> None:
    """As in TorchRL: init_random_frames=-1 means none; use_buffers changes nothing (rlcollect
    always writes into preallocated buffers)."""
    with TorchRLLayoutCollector(make_cartpole, TiltPolicy(), num_envs=3, frames_per_batch=12, total_frames=12,
                                seed=1, init_random_frames=-1, use_buffers=False) as collector:
        batch = next(iter(collector))
    native = native_batch()
    assert torch.equal(batch["action"], native["action"])  # the policy's, from the first frame
    assert torch.equal(batch["action"], TiltPolicy()(batch["observation"]))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sync", [True, False])
def test_num_collectors_builds_the_multi_process_collector(sync: bool) -> None:
    """TorchRL 0.14's way to ask for worker processes: Collector(num_collectors=..., sync=...)."""
    from rlcollect.torchrl import MultiAsyncCollector, MultiSyncCollector

    collector = TorchRLLayoutCollector(make_cartpole, TiltPolicy(), num_collectors=2, sync=sync,
                                       frames_per_batch=20, total_frames=20,
                                       backend_options={"num_envs_per_worker": 2})
    with collector:
        assert type(collector) is (MultiSyncCollector if sync else MultiAsyncCollector)
        assert collector.num_workers == 2 and collector.num_envs == 4
        batch = next(iter(collector))
    assert batch.batch_size == ((2, 2, 5) if sync else (2, 10))  # "stack" by default, as TorchRL
    assert torch.equal(batch["action"], TiltPolicy()(batch["observation"]))


def test_backend_selectors_are_checked() -> None:
    with pytest.raises(ValueError, match="does not support backend='thread'"):
        TorchRLLayoutCollector(make_cartpole, backend="thread", frames_per_batch=8)
    with pytest.raises(ValueError, match="backend='direct' supports at most one collector"):
        TorchRLLayoutCollector(make_cartpole, backend="direct", num_collectors=2, frames_per_batch=8)
    with pytest.raises(ValueError, match="num_collectors must be a positive integer"):
        TorchRLLayoutCollector(make_cartpole, num_collectors=0, frames_per_batch=8)
    with pytest.raises(ValueError, match=r"reserved selector keys: \['sync'\]"):
        TorchRLLayoutCollector(make_cartpole, backend="process", backend_options={"sync": True},
                               frames_per_batch=8)
    with pytest.raises(ValueError, match=r"duplicate top-level collector arguments: \['policy'\]"):
        TorchRLLayoutCollector(make_cartpole, None, backend="process", backend_options={"policy": None},
                               frames_per_batch=8)
    with pytest.raises(ValueError, match="does not match the number of environment constructors: 3 != 2"):
        TorchRLLayoutCollector([make_cartpole] * 2, num_collectors=3, frames_per_batch=8)
    direct = TorchRLLayoutCollector([make_cartpole], backend="direct", frames_per_batch=8)
    assert type(direct) is TorchRLLayoutCollector
    direct.shutdown()


@pytest.mark.timeout(120)
def test_backend_from_torchrls_context_and_torchrls_own_backends() -> None:
    """An enclosing torchrl.service_backend block chooses the backend; an explicit one wins;
    backend="rpc" / "distributed" / "submitit" build TorchRL's own collectors (patched here:
    they need a cluster), with every env constructor, sync and the backend options."""
    from unittest.mock import patch

    from torchrl import service_backend

    from rlcollect.torchrl import MultiAsyncCollector

    with service_backend("process"):
        pooled = TorchRLLayoutCollector(make_cartpole, TiltPolicy(), frames_per_batch=8, total_frames=8)
        direct = TorchRLLayoutCollector(make_cartpole, backend="direct", frames_per_batch=8)
    with pooled, direct:
        assert type(pooled) is MultiAsyncCollector and pooled.num_workers == 1
        assert type(direct) is TorchRLLayoutCollector
    with service_backend("thread"), pytest.raises(ValueError, match="enclosing torchrl.service_backend"):
        TorchRLLayoutCollector(make_cartpole, frames_per_batch=8)
    for backend, target in (("rpc", "torchrl.collectors.distributed.rpc.RPCCollector"),
                            ("submitit", "torchrl.collectors.distributed.generic.DistributedCollector")):
        with patch(target) as built:
            result = TorchRLLayoutCollector(make_cartpole, backend=backend, num_collectors=2,
                                            backend_options={"slurm_kwargs": {}}, frames_per_batch=8)
        assert result is built.return_value
        args, kwargs = built.call_args
        assert args == ([make_cartpole, make_cartpole],)
        assert kwargs["sync"] is False and kwargs["slurm_kwargs"] == {} and kwargs["frames_per_batch"] == 8
        assert kwargs.get("launcher", "submitit") == "submitit"


def test_compact_obs_drops_the_next_observations() -> None:
    """compact_obs=True: ("next", "observation") is gone; the next observation of a frame is the
    following frame's observation except at an episode's end; trust_policy is accepted."""
    with TorchRLLayoutCollector(make_cartpole, TiltPolicy(), num_envs=3, frames_per_batch=60, total_frames=60,
                                seed=1, compact_obs=True, trust_policy=True) as collector:
        batch = next(iter(collector))
    assert ("next", "observation") not in batch.keys(True)
    assert {"reward", "done", "terminated", "truncated"} <= set(batch["next"].keys())
    native = Collector(make_cartpole, TiltPolicy(), num_envs=3, frames_per_batch=60, total_frames=60, seed=1)
    with native:
        full = next(iter(native))
    assert torch.equal(batch["observation"], full["observation"])


@pytest.mark.timeout(120)
def test_multi_collector_dispatches_on_sync_and_async_collector_runs_one_worker() -> None:
    """MultiCollector(sync=True/False) is TorchRL 0.14's way to name either multi-process collector;
    AsyncCollector collects one env in one worker process."""
    from rlcollect.torchrl import (
        AsyncCollector,
        MultiAsyncCollector,
        MultiCollector,
        MultiSyncCollector,
        aSyncDataCollector,
    )

    with pytest.raises(TypeError, match="MultiCollector needs sync=True"):
        MultiCollector([make_cartpole], TiltPolicy(), frames_per_batch=10)
    with pytest.raises(TypeError, match="sync must be True or False"):
        MultiCollector([make_cartpole], TiltPolicy(), frames_per_batch=10, sync="yes")
    for sync, cls in ((True, MultiSyncCollector), (False, MultiAsyncCollector)):
        collector = MultiCollector([make_cartpole], TiltPolicy(), frames_per_batch=10, total_frames=10,
                                   sync=sync)
        with collector:
            assert type(collector) is cls and isinstance(collector, MultiCollector)
            (batch,) = list(collector)
        assert batch.numel() == 10 and torch.equal(batch["action"], TiltPolicy()(batch["observation"]))
    assert aSyncDataCollector is AsyncCollector
    with AsyncCollector(make_cartpole, TiltPolicy(), frames_per_batch=10, total_frames=20, seed=1,
                        create_env_kwargs=[{}]) as collector:
        assert isinstance(collector, MultiAsyncCollector) and collector.num_workers == 1
        batches = list(collector)
    assert [b.numel() for b in batches] == [10, 10]
    with Collector(make_cartpole, TiltPolicy(), frames_per_batch=20, total_frames=20, seed=1) as single:
        reference = next(iter(single))
    collected = torch.cat([b["observation"].reshape(10, 4) for b in batches])
    assert torch.equal(collected, reference["observation"].reshape(20, 4))  # one env, one seed: same steps


@pytest.mark.timeout(120)
def test_frames_per_batch_per_worker() -> None:
    """TorchRL's per-worker list: a synchronous batch holds their sum; in an asynchronous one, as
    TorchRL 0.14 does, each worker's batch holds their sum too (rlcollect's own: one worker's
    count); a list of the wrong length is refused with TorchRL's message."""
    from rlcollect.torchrl import MultiAsyncCollector, MultiSyncCollector

    with MultiSyncCollector([make_cartpole] * 2, TiltPolicy(), frames_per_batch=[10, 10], total_frames=20,
                            seed=3, cat_results=0) as listed:
        (batch,) = list(listed)
    with MultiSyncCollector([make_cartpole] * 2, TiltPolicy(), frames_per_batch=20, total_frames=20,
                            seed=3, cat_results=0) as summed:
        (same,) = list(summed)
    assert batch.numel() == 20 and torch.equal(batch["observation"], same["observation"])
    with MultiAsyncCollector([make_cartpole] * 2, TiltPolicy(), frames_per_batch=[15, 5],
                             total_frames=40) as collector:
        assert [b.numel() for b in collector] == [20, 20]
    with NativeMultiAsync([make_cartpole] * 2, TiltPolicy(), frames_per_batch=[5, 5],
                          total_frames=20) as native:
        assert [b.numel() for b in native] == [5, 5, 5, 5]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="exactly one value per worker: got frames_per_batch=\\[10\\] for 2"):
        MultiSyncCollector([make_cartpole] * 2, TiltPolicy(), frames_per_batch=[10])


@pytest.mark.timeout(120)
def test_policy_with_policy_factory_the_weights_come_from_the_policy() -> None:
    """As TorchRL: each worker builds its policy with policy_factory; policy stays here as the
    source of the weights (the workers start from them, and update_policy_weights_() sends them)."""
    source = TiltPolicy(sign=-1.0)
    source.lock = threading.Lock()  # cannot be pickled: it never has to leave this process
    with NativeMultiSync(make_cartpole, source, policy_factory=TiltPolicy, num_workers=2,
                         frames_per_batch=20, seed=0) as collector:
        first = collector.next()
        with torch.no_grad():
            source.weight.mul_(-1)
        collector.update_policy_weights_()
        second = collector.next()
    assert first is not None and second is not None
    assert torch.equal(first["action"], TiltPolicy(sign=-1.0)(first["observation"]))  # the policy's weights
    assert not torch.equal(first["action"], TiltPolicy()(first["observation"]))  # not the factory's own
    assert torch.equal(second["action"], source(second["observation"]))  # the policy's, once sent
    assert not torch.equal(second["action"], TiltPolicy(sign=-1.0)(second["observation"]))
    with pytest.raises(TypeError, match="Collector runs one policy, in this process"):
        Collector(make_cartpole, source, policy_factory=TiltPolicy, frames_per_batch=8)


def test_track_traj_ids_false_leaves_the_ids_out() -> None:
    with TorchRLLayoutCollector(make_cartpole, TiltPolicy(), num_envs=3, frames_per_batch=12, total_frames=12,
                                seed=1, track_traj_ids=False) as collector:
        batch = next(iter(collector))
    native = native_batch()
    assert ("collector", "traj_ids") not in batch.keys(True)
    assert batch.get("collector", None) is None  # nor the group, empty without them
    assert torch.equal(batch["observation"], native["observation"])
    with pytest.raises(ValueError, match="track_traj_ids=False leaves out the trajectory ids"):
        TorchRLLayoutCollector(make_cartpole, frames_per_batch=8, track_traj_ids=False, split_trajs=True)


def test_trajs_per_write_and_the_threads() -> None:
    """With a replay buffer, trajs_per_batch writes each batch's complete trajectories,
    trajs_per_write per extend call (default: all in one) and yields one None per batch, as
    TorchRL; the same trajectories either way. num_threads sets this process's torch threads;
    worker_idx and weight_recv_schemes as TorchRL."""
    from rlcollect.weights import SharedMemWeightSyncScheme

    sinks = []
    for extra in ({}, {"trajs_per_write": 1}):
        sink = ListSink()
        with TorchRLLayoutCollector(make_cartpole, None, num_envs=2, frames_per_batch=60,
                                    total_frames=300, seed=1, trajs_per_batch=2, replay_buffer=sink,
                                    **extra) as collector:
            assert list(collector) == [None] * 5
        episodes = [int(item["next", "done"].sum()) for item in sink.items]
        assert all(bool(item["next", "done"][-1]) for item in sink.items)  # whole episodes only
        if extra:
            assert set(episodes) == {1}
        else:
            assert len(sink.items) <= 5 and max(episodes) > 2
        sinks.append(torch.cat(sink.items))
    assert sinks[0].numel() > 20 and torch.equal(sinks[0]["observation"], sinks[1]["observation"])
    threads = torch.get_num_threads()
    try:
        from rlcollect.torchrl import MultiSyncCollector

        MultiSyncCollector([make_cartpole], frames_per_batch=8, num_threads=1).shutdown()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="trajs_per_write groups the complete trajectories"):
        TorchRLLayoutCollector(make_cartpole, frames_per_batch=8, trajs_per_write=2)
    with pytest.raises(ValueError, match="num_sub_threads=2 is not supported"):
        TorchRLLayoutCollector(make_cartpole, frames_per_batch=8, num_sub_threads=2)
    with pytest.raises(ValueError, match="interruptor=.* is not supported"):
        TorchRLLayoutCollector(make_cartpole, frames_per_batch=8, interruptor=object())
    with MultiSyncCollector([make_cartpole], frames_per_batch=8, preemptive_threshold=0.5) as preempted:
        assert preempted.interruptor is None  # TorchRL's attribute: preemption is a flag per slot here
    sender = SharedMemWeightSyncScheme()
    learner = TiltPolicy(sign=-1.0)
    sender.init_on_sender(model_id="policy", model=learner, num_workers=1)
    receivers = {"policy": sender.receiver(0)}
    with TorchRLLayoutCollector(make_cartpole, TiltPolicy(), frames_per_batch=10, worker_idx=0,
                                weight_recv_schemes=receivers, no_cuda_sync=True) as collector:
        assert collector.worker_idx == 0
        batches = iter(collector)
        first = next(batches)
        sender.send()
        second = next(batches)
    assert torch.equal(first["action"], TiltPolicy()(first["observation"]))  # its own weights, until
    assert torch.equal(second["action"], learner(second["observation"]))  # the sender sends the learner's


def test_devices_per_worker_as_torchrl_lists_them() -> None:
    from rlcollect.torchrl import MultiSyncCollector

    collector = MultiSyncCollector([make_cartpole] * 2, TiltPolicy(), frames_per_batch=8,
                                   device=[torch.device("cpu")] * 2, storing_device=["cpu", "cpu"])
    with collector:
        assert collector.options.storing_device == torch.device("cpu")
        assert collector.options.policy_device == torch.device("cpu")
        batch = next(iter(collector))
    assert batch.device == torch.device("cpu")


@pytest.mark.timeout(120)
def test_stats_is_torchrls_snapshot_with_rlcollects_counters_as_attributes() -> None:
    import json

    from rlcollect.torchrl import MultiSyncCollector

    with TorchRLLayoutCollector(make_cartpole, TiltPolicy(), frames_per_batch=16, total_frames=32,
                                track_policy_version=True) as collector:
        assert collector.stats() == {"frames": 0, "batches": 0, "total_frames": 32, "completed": False,
                                     "requested_frames_per_batch": 16, "policy_version": 0}
        frames = [collector.stats()["frames"] for _ in collector]
        stats = collector.stats()
    assert frames == [16, 32] and stats["batches"] == 2 and stats["completed"] is True
    assert json.loads(json.dumps(stats)) == stats  # serializable, as TorchRL's
    assert stats.frames == 32 and stats.fps > 0  # rlcollect's CollectorStats, as attributes
    with MultiSyncCollector([make_cartpole] * 2, TiltPolicy(), frames_per_batch=16, total_frames=32) as multi:
        with pytest.raises(ValueError, match="workers must be one of"):
            multi.stats(workers="bogus")
        next(iter(multi))
        aggregate, both, per_worker = (multi.stats(view) for view in ("aggregate", "both", "per_worker"))
    assert aggregate["workers"] == aggregate["workers_alive"] == 2 and aggregate["frames"] == 16
    assert aggregate["worker_frames"] == 16 and "policy_version" not in aggregate
    assert {"frames", "worker_0/frames", "worker_1/frames"} <= set(both)
    assert "frames" not in per_worker and per_worker["worker_0/frames"] + per_worker["worker_1/frames"] == 16


def test_private_keys_are_left_out_in_torchrls_layout() -> None:
    """A policy's keys with a part starting with ``_`` (an exploration module's state) leave the
    batch in TorchRL's layout unless ``_exclude_private_keys`` is False; the native layout keeps
    everything it collected."""
    from tensordict.nn import TensorDictModule, TensorDictSequential

    policy = TensorDictSequential(
        TensorDictModule(lambda obs: (obs[..., 2] > 0).long(), in_keys=["observation"], out_keys=["action"]),
        TensorDictModule(lambda obs: (obs.sum(-1), obs[..., 0], obs[..., 1]), in_keys=["observation"],
                         out_keys=["_noise", ("out", "_state"), "kept"]),
    )
    with TorchRLLayoutCollector(make_cartpole, policy, frames_per_batch=8, total_frames=16) as collector:
        batch = next(iter(collector))
        assert {"kept", "observation"} <= set(batch.keys()) and "_noise" not in set(batch.keys())
        assert ("out", "_state") not in batch.keys(True, True)
        collector._exclude_private_keys = False
        batch = next(iter(collector))
        assert torch.equal(batch["_noise"], batch["observation"].sum(-1))
        assert torch.equal(batch["out", "_state"], batch["observation"][..., 0])
    with Collector(make_cartpole, policy, frames_per_batch=8, total_frames=8) as collector:
        assert {"_noise", "kept"} <= set(next(iter(collector)).keys())


@pytest.mark.parametrize("layout", ["rlcollect", "torchrl"])
def test_fake_tensordict_is_a_zeroed_batch_of_the_same_structure(layout: str) -> None:
    """fake_tensordict(): the keys, dtypes, shape and names of the first real batch (postproc
    applied), zero-filled, made before any step; the collector's multi-process siblings refuse."""
    def postproc(batch: TensorDictBase) -> TensorDictBase:
        return batch.set("twice", batch["observation"] * 2)

    with Collector(make_cartpole, TiltPolicy(), num_envs=3, frames_per_batch=12, total_frames=12,
                   postproc=postproc, layout=TorchRLLayout() if layout == "torchrl" else layout,
                   seed=1) as collector:
        fake = collector.fake_tensordict()
        assert collector.stats().frames == 0
        real = next(iter(collector))
    assert real is not None
    assert fake.batch_size == real.batch_size == torch.Size([3, 4])
    assert fake.names == real.names
    assert sorted(map(str, fake.keys(True, True))) == sorted(map(str, real.keys(True, True)))
    for key, value in fake.items(True, True):
        assert value.dtype == real[key].dtype, key
        assert not value.any(), key
    assert real["observation"].any()  # the fake is not a view of the buffer the batch came from

    with NativeMultiSync([make_cartpole], TiltPolicy(), frames_per_batch=4) as multi, \
            pytest.raises(NotImplementedError, match="fake_tensordict"):
        multi.fake_tensordict()


def test_batches_are_stored_on_the_env_and_policy_device_and_the_storages() -> None:
    """As TorchRL: without storing_device, batches live on device, else on the env's device when
    the policy shares it, else nowhere in particular (None); a replay buffer's storage with a
    device receives frames on that device, whatever postproc did."""
    def batch_device(**devices: str) -> torch.device | None:
        with Collector(make_cartpole, TiltPolicy(), frames_per_batch=4, total_frames=4, **devices) as c:
            batch = next(iter(c))
        assert batch is not None
        return batch.device

    cpu = torch.device("cpu")
    assert batch_device() is None and batch_device(env_device="cpu") is None
    assert batch_device(device="cpu") == cpu and batch_device(env_device="cpu", policy_device="cpu") == cpu

    from torchrl.data import LazyTensorStorage, ReplayBuffer
    buffer = ReplayBuffer(storage=LazyTensorStorage(100))
    seen = []
    extend = buffer.extend
    buffer.extend = lambda frames: (seen.append(frames.device), extend(frames))[1]  # type: ignore[method-assign]
    with TorchRLLayoutCollector(make_cartpole, TiltPolicy(), frames_per_batch=8, total_frames=16,
                                replay_buffer=buffer, postproc=lambda td: td.clear_device_()) as collector:
        assert list(collector) == [None, None]
    assert seen == [cpu, cpu] and len(buffer) == 16


def test_trajs_per_batch_without_traj_format_warns_of_torchrls_coming_default() -> None:
    """As TorchRL 0.14: trajs_per_batch without traj_format (and without a replay buffer) warns
    that the default ('padded') becomes 'cat' in v0.16; rlcollect's own Collector does not warn."""
    import warnings

    with pytest.warns(FutureWarning, match="will change to 'cat' in torchrl v0.16"):
        collector = TorchRLLayoutCollector(make_cartpole, TiltPolicy(), frames_per_batch=8, trajs_per_batch=2)
    with collector:
        assert collector.traj_format == "padded"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kwargs in ({"traj_format": "cat"}, {"traj_format": "padded"}):
            with TorchRLLayoutCollector(make_cartpole, TiltPolicy(), frames_per_batch=8, trajs_per_batch=2,
                                        **kwargs) as chosen:
                assert chosen.traj_format == kwargs["traj_format"]
        Collector(make_cartpole, TiltPolicy(), frames_per_batch=8, trajs_per_batch=2).shutdown()


@pytest.mark.timeout(120)
def test_max_idle_count_is_the_seconds_a_worker_may_take(monkeypatch: pytest.MonkeyPatch) -> None:
    """TorchRL's MAX_IDLE_COUNT environment variable (its 1 s polls a worker may stay silent)
    sets the multi-process collectors' timeout; an explicit timeout wins; nonsense is refused."""
    from rlcollect.torchrl import MultiSyncCollector

    monkeypatch.setenv("MAX_IDLE_COUNT", "7")
    with MultiSyncCollector([make_cartpole], frames_per_batch=8) as collector:
        assert collector.options.timeout == 7.0
    with MultiSyncCollector([make_cartpole], frames_per_batch=8, timeout=30.0) as collector:
        assert collector.options.timeout == 30.0
    monkeypatch.setenv("MAX_IDLE_COUNT", "soon")
    with pytest.raises(ValueError, match="MAX_IDLE_COUNT='soon' must be a positive int"):
        MultiSyncCollector([make_cartpole], frames_per_batch=8)


@pytest.mark.parametrize("envs", [1, 2])
def test_cat_results_minus_one_leaves_out_the_steps_a_preempted_worker_never_collected(envs: int) -> None:
    """A preempted synchronous batch in TorchRL's layout, ``[workers, envs, T]`` (``[workers, T]``
    for envs without a batch size), grouped along time: each worker brings the steps in which one
    of its envs collected a frame, as TorchRL's ``cat_results=-1`` does; ``cat_results=0`` keeps
    every frame and the mask."""
    workers, steps = 3, 4
    collected = torch.tensor([4, 1, 2])  # steps each worker collected before it was stopped
    if envs == 2:  # worker 2's second env stopped a step before its first
        mask = torch.stack([torch.arange(steps).expand(envs, steps) < n for n in collected])
        mask[2, 1, 1] = False
    else:
        mask = torch.stack([torch.arange(steps) < n for n in collected])
    shape = (workers, envs, steps) if envs == 2 else (workers, steps)
    frame = torch.arange(mask.numel()).reshape(shape)
    batch = TensorDict({"frame": frame, ("collector", "mask"): mask}, shape)

    out = GroupWorkers(-1)(batch, BatchShape(workers=workers, stacked=True))

    kept = [frame[w][..., mask[w].reshape(-1, steps).any(0)] for w in range(workers)]  # the reference
    assert torch.equal(out["frame"], torch.cat(kept, -1))
    assert out.batch_size == ((envs, 7) if envs == 2 else (7,)) and out.names[-1] == "time"
    assert torch.equal(out["collector", "mask"], torch.cat(
        [mask[w][..., mask[w].reshape(-1, steps).any(0)] for w in range(workers)], -1))
    whole = GroupWorkers(0)(batch, BatchShape(workers=workers, stacked=True))
    assert whole.numel() == frame.numel() and torch.equal(whole["collector", "mask"], mask.reshape(-1, steps)
                                                          if envs == 2 else mask.reshape(-1))
