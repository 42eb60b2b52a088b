"""A policy gets an observation of its own at each step, as in a hand-written loop: the inputs it
keeps (a frame history, the previous observation) still hold their own step's values at later
steps and batches. In every collector, for a module and a TensorDict policy.

:class:`KeepsInputs` keeps every observation it is given and acts with the number of kept ones
that changed since (a Box action): the batch's actions must all be zero.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector

pytestmark = pytest.mark.timeout(120)


class KeepsInputs(nn.Module):
    """Pendulum ``[N, 3] -> [N, 1]``: the count of kept inputs that no longer hold their values."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        changed = sum(not torch.equal(kept, value) for kept, value in self.kept)
        self.kept.append((obs, obs.clone()))
        return torch.full((obs.shape[0], 1), float(changed))


def build(kind: str, policy: Any) -> Any:
    common: dict[str, Any] = {"frames_per_batch": 16, "total_frames": 48, "seed": 0}
    if kind == "single":
        return Collector("Pendulum-v1", policy, num_envs=2, **common)
    if kind == "batched":
        return AsyncBatchedCollector("Pendulum-v1", policy, num_envs=2, **common)
    workers = {"sync": MultiSyncCollector, "async": MultiAsyncCollector}[kind]
    return workers("Pendulum-v1", policy, num_workers=2, **common)


@pytest.mark.parametrize("tensordict", [False, True], ids=["module", "tensordict"])
@pytest.mark.parametrize("kind", ["single", "sync", "async", "batched"])
def test_kept_inputs_hold_their_values(kind: str, tensordict: bool) -> None:
    policy: Any = KeepsInputs()
    if tensordict:
        policy = TensorDictModule(policy, in_keys=["observation"], out_keys=["action"])
    with build(kind, policy) as collector:
        batches = [batch.clone() for batch in collector]
    assert len(batches) == 3  # the buffers are reused: inputs kept from the first batch would be overwritten
    for batch in batches:
        assert batch["action"].shape == (*batch.batch_size, 1)
        assert (batch["action"] == 0).all(), "an input the policy kept was overwritten"
