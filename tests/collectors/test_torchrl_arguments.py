"""TorchRL's own collector arguments on rlcollect.torchrl's collectors: the same data, regrouped
or written as TorchRL does (cat_results is tested against TorchRL in tests/interop)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import Collector
from rlcollect.torchrl import Collector as TorchRLLayoutCollector
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
    with pytest.raises(ValueError, match="backend='thread' is not one of"):
        TorchRLLayoutCollector(make_cartpole, backend="thread", frames_per_batch=8)
    with pytest.raises(ValueError, match="backend='direct' collects in this process"):
        TorchRLLayoutCollector(make_cartpole, backend="direct", num_collectors=2, frames_per_batch=8)
    with pytest.raises(ValueError, match="num_collectors must be a positive int"):
        TorchRLLayoutCollector(make_cartpole, num_collectors=0, frames_per_batch=8)
    direct = TorchRLLayoutCollector(make_cartpole, backend="direct", frames_per_batch=8)
    assert type(direct) is TorchRLLayoutCollector
    direct.shutdown()


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
    with pytest.raises(ValueError, match="cudagraph_policy=True is not supported"):
        TorchRLLayoutCollector(make_cartpole, frames_per_batch=8, cudagraph_policy=True)
