"""TorchRL's own replay buffer takes our batches, flattened: anything with ``extend`` is a sink."""

from __future__ import annotations

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
