"""TorchRL's own replay buffer takes our batches, flattened: anything with ``extend`` is a sink."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlcollect import Collector
from rlcollect.replay import flatten_batch

pytestmark = pytest.mark.timeout(60)


def test_torchrl_replay_buffer_extends_a_flattened_collector_batch() -> None:
    torchrl_data = pytest.importorskip("torchrl.data")
    with Collector("CartPole-v1", frames_per_batch=16, num_envs=2, seed=0) as collector:
        batch = collector.next()
    rb = torchrl_data.ReplayBuffer(storage=torchrl_data.LazyTensorStorage(100), batch_size=4)
    rb.extend(flatten_batch(batch))  # or batch.reshape(-1): there is no mask here
    assert len(rb) == 16
    stored = rb.storage[:16]
    assert torch.equal(stored["observation"], batch["observation"].reshape(16, 4))
    assert torch.equal(stored["next", "done"], batch["next", "done"].reshape(16, 1))
    assert torch.equal(stored["collector", "traj_ids"], batch["collector", "traj_ids"].reshape(16))
    assert rb.sample().batch_size == torch.Size([4])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_torchrl_storage_of_two_dims_receives_rows_of_envs(workers: int) -> None:
    """``LazyTensorStorage(n, ndim=2)`` is extended with ``[envs, T]`` rows along ``"time"``, as
    TorchRL's collectors extend it: the same storage as extending it with each batch by hand."""
    torchrl_data = pytest.importorskip("torchrl.data")
    from rlcollect import MultiSyncCollector

    def buffer() -> Any:
        return torchrl_data.ReplayBuffer(storage=torchrl_data.LazyTensorStorage(64, ndim=2), batch_size=4)

    rb, by_hand = buffer(), buffer()
    if workers:
        kwargs: dict[str, Any] = {"num_workers": 2, "num_envs_per_worker": 2}
        make: Any = MultiSyncCollector
    else:
        kwargs, make = {"num_envs": 2}, Collector
    with make("CartPole-v1", None, frames_per_batch=16, total_frames=32, seed=0, replay_buffer=rb,
              **kwargs) as collector:
        assert list(collector) == [None, None]
    with make("CartPole-v1", None, frames_per_batch=16, total_frames=32, seed=0, **kwargs) as collector:
        for batch in collector:
            by_hand.extend(batch)
    assert rb.storage.ndim == 2 and len(rb) == len(by_hand) == 32
    stored, expected = rb.storage[:], by_hand.storage[:]
    assert stored.batch_size == expected.batch_size == (32 // (2 * (workers or 1)), 2 * (workers or 1))
    for key in ("observation", "action", ("next", "reward"), ("collector", "traj_ids")):
        assert torch.equal(stored[key], expected[key]), key
