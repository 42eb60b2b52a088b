"""``Collector.start()``: the policy acts in the collection thread as a copy of the module you
passed, so the training thread never changes the weights of a batch under way, and each frame's
``policy_version`` names the weights that chose it."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, ReplayBuffer
from rlcollect.weights import StaleWeightsWarning

pytestmark = pytest.mark.timeout(120)


class Switch(torch.nn.Module):
    """Action 1 where its bias is above 0.5, else 0, whatever the observation."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (torch.zeros(obs.shape[0]) + self.bias > 0.5).long()


def background(policy: Any, buffer: ReplayBuffer) -> Collector:
    collector = Collector("CartPole-v1", policy, num_envs=2, frames_per_batch=64, replay_buffer=buffer,
                          seed=0)
    collector.start()
    return collector


def wait_for(buffer: ReplayBuffer, frames: int) -> None:
    deadline = time.monotonic() + 60
    while len(buffer) < frames:
        assert time.monotonic() < deadline, f"{len(buffer)} frames after 60 s"
        time.sleep(0.005)


def stored(collector: Any, buffer: ReplayBuffer) -> tuple[Any, int | None]:
    """The buffer's frames and the collector's policy version, read with collection paused."""
    with collector.pause():
        return buffer.data[: len(buffer)], collector.stats().policy_version


def flip_and_send(policy: Switch, collector: Any, buffer: ReplayBuffer, updates: int
                  ) -> tuple[Any, int | None]:
    """Flip the weights in place and send them ``updates`` times while collection runs; then the
    stored frames and the collector's version."""
    wait_for(buffer, 64)
    for version in range(1, updates + 1):
        with torch.no_grad():
            policy.bias.fill_(float(version % 2))
        time.sleep(0.002)  # the collection thread steps on: the edit must not reach it yet
        collector.update_policy_weights_()
        time.sleep(0.005)
    wait_for(buffer, len(buffer) + 256)
    return stored(collector, buffer)


def test_each_frame_is_stamped_with_the_weights_that_chose_it() -> None:
    """Version v's weights choose action v % 2: the training thread flips the weights in place and
    sends them, 40 times, while the collection thread steps. (Acting with your module itself, the
    frames after an edit in a batch kept the version the batch began with: 8 % of them here.)"""
    policy, buffer = Switch(), ReplayBuffer(100_000)
    collector = background(policy, buffer)
    try:
        frames, version = flip_and_send(policy, collector, buffer, 40)
    finally:
        collector.async_shutdown()
    assert version == 40
    versions, actions = frames["policy_version"], frames["action"]
    assert versions.min() == 0 and versions.max() == 40
    assert torch.equal(actions, versions % 2)
    assert (versions.diff() >= 0).all()  # one env-major run per batch, batches in order: never back


@pytest.mark.parametrize("kind", ["multi_async", "batched"])
def test_collectors_with_workers_stamp_each_frame_as_collector_does(kind: str) -> None:
    """The same run on the collectors whose policies act as copies already (workers, a policy
    server): every frame's version names the weights that chose it."""
    policy, buffer = Switch(), ReplayBuffer(100_000, storage="shared")
    collector: Any = (
        MultiAsyncCollector("CartPole-v1", policy, num_workers=2, frames_per_batch=64, replay_buffer=buffer)
        if kind == "multi_async" else
        AsyncBatchedCollector("CartPole-v1", policy, num_envs=2, frames_per_batch=64, replay_buffer=buffer))
    collector.start()
    try:
        frames, version = flip_and_send(policy, collector, buffer, 20)
    finally:
        collector.async_shutdown()
    assert version == 20
    versions = frames["policy_version"]
    assert versions.min() == 0 and versions.max() == 20
    assert torch.equal(frames["action"], versions % 2)


def test_an_edit_never_sent_does_not_act_and_is_said() -> None:
    policy, buffer = Switch(), ReplayBuffer(100_000)
    collector = background(policy, buffer)
    try:
        wait_for(buffer, 64)
        with torch.no_grad(), pytest.warns(StaleWeightsWarning):
            policy.bias.fill_(1.0)
            wait_for(buffer, len(buffer) + 64 * 12)  # the warning comes 10 batches after the edit
        frames, _ = stored(collector, buffer)
    finally:
        collector.async_shutdown()
    assert int(frames["action"].sum()) == 0 and int(frames["policy_version"].max()) == 0


def test_a_bad_update_raises_in_the_callers_thread_and_collection_goes_on() -> None:
    policy, buffer = Switch(), ReplayBuffer(100_000)
    collector = background(policy, buffer)
    try:
        wait_for(buffer, 64)
        with pytest.raises(ValueError, match="bias"):
            collector.update_policy_weights_({"bias": torch.ones(3)})
        collector.update_policy_weights_({"bias": torch.ones(())})
        wait_for(buffer, len(buffer) + 256)
        frames, version = stored(collector, buffer)
    finally:
        collector.async_shutdown()
    assert version == 1
    assert torch.equal(frames["action"], frames["policy_version"])  # version 1: bias 1, action 1
    assert int(frames["policy_version"][-1]) == 1
    assert policy.bias.detach().item() == 0.0  # your module is left as it was
