"""Calls on a collector's workers: rlcollect's ``call_workers`` reads or calls an attribute of
each worker (in worker order; a collector without workers is its own one), and TorchRL's remote
helpers on ``rlcollect.torchrl``'s collectors (``get_distant_attr``, ``map_fn``) are built on it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import rlcollect.torchrl as wing
from rlcollect import Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.replay import ReplayBuffer
from tests.envs_for_tests import TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)


class Scaled(torch.nn.Module):
    """A policy with one weight (the action is 1 where scale * obs[2] > 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (self.scale * obs[..., 2] > 0).long()


def test_in_one_process_the_collector_itself() -> None:
    with wing.Collector(make_cartpole, TiltPolicy(), num_envs=2, frames_per_batch=8,
                        total_frames=16) as collector:
        assert collector.get_distant_attr("frames_per_batch") == 8
        assert collector.map_fn("get_distant_attr", [("frames_per_batch",), ("total_frames",)]) == [8, 16]
        assert collector.map_fn("stats")[0]["frames"] == 0  # one call without arguments
        with pytest.raises(ValueError, match="must have the same length, got 1 and 2"):
            collector.map_fn("get_distant_attr", [("frames_per_batch",)], [{}, {}])
        with pytest.raises(AttributeError, match="frames_per_batch is not callable"):
            collector.map_fn("frames_per_batch")
    with Collector(make_cartpole, TiltPolicy(), num_envs=2, frames_per_batch=8, total_frames=16) as native:
        assert native.call_workers("frames_per_batch") == [8]
        assert native.call_workers("stats", [()])[0].frames == 0
        assert native.call_workers("cascade_execute", [("total_frames",)]) == [16]
        with pytest.raises(ValueError, match=r"Expected 1 argument entries \(one per worker\), got 2"):
            native.call_workers("stats", [(), ()])
        with pytest.raises(ValueError, match="frames_per_batch is not callable"):
            native.call_workers("frames_per_batch", [(1,)])
        assert not hasattr(native, "get_distant_attr") and not hasattr(native, "map_fn")  # the wing's


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_with_workers_each_worker_answers(kind: str) -> None:
    buffer = ReplayBuffer(1000, storage="shared")
    policy = Scaled()
    collector_class = wing.MultiSyncCollector if kind == "sync" else wing.MultiAsyncCollector
    collector = collector_class([make_cartpole] * 2, policy, num_envs_per_worker=2,
                                frames_per_batch=16, replay_buffer=buffer)
    try:
        assert collector.get_distant_attr("worker_idx") == [0, 1]
        per_worker = 16 if kind == "async" else 8
        assert collector.get_distant_attr("frames_per_batch") == [per_worker] * 2
        calls = [("worker_idx",), ("frames_per_batch",)]
        assert collector.map_fn("cascade_execute", calls) == [0, per_worker]
        collector.next()
        collector.update_policy_weights_()
        collector.next()
        collector.next()
        assert collector.get_distant_attr("replay_buffer.write_count") == [buffer.write_count] * 2
        assert collector.map_fn("replay_buffer.__len__") == [len(buffer)] * 2
        versions = collector.get_distant_attr("policy_version")
        assert max(versions) == 1 and set(versions) <= {0, 1}
        scales = collector.map_fn("get_distant_attr", [("policy.scale",)] * 2)
        assert all(float(scale.detach()) == 1.0 for scale in scales)
        assert collector.call_workers("read", [("worker_idx",), ("policy_version",)])[0] == 0
        with pytest.raises(ValueError, match="Expected 2 argument entries .one per worker., got 1"):
            collector.map_fn("get_distant_attr", [("worker_idx",)])
        with pytest.raises(AttributeError, match="no attribute 'nothing'"):
            collector.get_distant_attr("nothing")
        assert collector.get_distant_attr("worker_idx") == [0, 1]  # an error in a worker kills nothing
    finally:
        collector.shutdown()


@pytest.mark.parametrize("collector_class", [MultiSyncCollector, MultiAsyncCollector])
def test_call_workers_reads_and_calls_each_workers_attribute(collector_class: Any) -> None:
    with collector_class(make_cartpole, Scaled(), num_workers=2, num_envs_per_worker=2,
                         frames_per_batch=16) as collector:
        assert collector.call_workers("worker_idx") == [0, 1]
        assert collector.call_workers("cascade_execute", [("worker_idx",), ("frames_per_batch",)]) == [
            0, 16 if collector_class is MultiAsyncCollector else 8]
        assert collector.call_workers("get_policy_version", kwargs=[{}, {}]) == [0, 0]
        assert [float(scale.detach()) for scale in collector.call_workers("policy.scale")] == [1.0, 1.0]
        with pytest.raises(ValueError, match=r"Expected 2 keyword-argument entries \(one per worker\)"):
            collector.call_workers("get_policy_version", [(), ()], [{}])
        with pytest.raises(AttributeError, match="no attribute 'nothing'"):
            collector.call_workers("nothing")
        assert collector.call_workers("worker_idx") == [0, 1]  # an error in a worker kills nothing
