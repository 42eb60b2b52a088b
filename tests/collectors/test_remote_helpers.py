"""TorchRL's remote helpers: ``get_distant_attr`` and ``map_fn`` read and call attributes of the
collector, or of each worker (in worker order)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

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
    with Collector(make_cartpole, TiltPolicy(), num_envs=2, frames_per_batch=8, total_frames=16) as collector:
        assert collector.get_distant_attr("frames_per_batch") == 8
        assert collector.map_fn("get_distant_attr", [("frames_per_batch",), ("total_frames",)]) == [8, 16]
        assert collector.map_fn("stats")[0].frames == 0  # one call without arguments
        with pytest.raises(ValueError, match="must have the same length, got 1 and 2"):
            collector.map_fn("get_distant_attr", [("frames_per_batch",)], [{}, {}])
        with pytest.raises(AttributeError, match="frames_per_batch is not callable"):
            collector.map_fn("frames_per_batch")


@pytest.mark.parametrize("collector_class", [MultiSyncCollector, MultiAsyncCollector])
def test_with_workers_each_worker_answers(collector_class: Any) -> None:
    buffer = ReplayBuffer(1000, storage="shared")
    policy = Scaled()
    collector = collector_class(make_cartpole, policy, num_workers=2, num_envs_per_worker=2,
                                frames_per_batch=16, replay_buffer=buffer)
    try:
        assert collector.get_distant_attr("worker_idx") == [0, 1]
        per_worker = 16 if collector_class is MultiAsyncCollector else 8
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
        with pytest.raises(ValueError, match="Expected 2 argument entries .one per worker., got 1"):
            collector.map_fn("get_distant_attr", [("worker_idx",)])
        with pytest.raises(AttributeError, match="no attribute 'nothing'"):
            collector.get_distant_attr("nothing")
        assert collector.get_distant_attr("worker_idx") == [0, 1]  # an error in a worker kills nothing
    finally:
        collector.shutdown()
