"""A policy that writes into its input changes nothing that is stored, in every collector.

Each collector runs twice with the same seed and the same (constant) actions: once with a policy
that only reads its observations, once with one that overwrites them (``obs.fill_(7.0)``, or a
TensorDict policy that writes into and replaces its ``observation`` entry). The batches must be
equal, key for key: what is stored is what the env returned.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector

pytestmark = pytest.mark.timeout(120)

KINDS = ["single", "sync", "async", "batched"]


class Reads(nn.Module):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs[:, 0] > 10.0).long()  # 0 for CartPole's observations


class Writes(Reads):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        action = super().forward(obs)
        obs.fill_(7.0)
        return action


class WritesAndReplaces(nn.Module):
    """A TensorDict policy's module: its out_keys overwrite the observation entry too."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        action = (obs[:, 0] > 10.0).long()
        obs.mul_(0.0)
        return action, obs + 7.0


def policy(kind: str, writes: bool) -> Any:
    if kind == "module":
        return Writes() if writes else Reads()
    if writes:
        return TensorDictModule(WritesAndReplaces(), in_keys=["observation"],
                                out_keys=["action", "observation"])
    return TensorDictModule(Reads(), in_keys=["observation"], out_keys=["action"])


def run(kind: str, policy: Any) -> list[TensorDictBase]:
    frames = {"frames_per_batch": 32, "total_frames": 96, "seed": 5}
    if kind == "single":
        collector: Any = Collector("CartPole-v1", policy, num_envs=2, **frames)
    elif kind in ("sync", "async"):
        cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
        collector = cls("CartPole-v1", policy, num_workers=2, **frames)
    else:
        collector = AsyncBatchedCollector("CartPole-v1", policy, num_envs=2, envs_per_worker=1, **frames)
    with collector:
        return [batch.clone() for batch in collector]


def assert_same(batch: TensorDictBase, reference: TensorDictBase) -> None:
    assert not (batch["observation"] == 7.0).any()
    for key in reference.keys(True, True):
        assert torch.equal(batch.get(key), reference.get(key)), key


@pytest.mark.parametrize("policy_kind", ["module", "tensordict"])
@pytest.mark.parametrize("kind", KINDS)
def test_what_the_policy_does_to_its_input_is_not_stored(kind: str, policy_kind: str) -> None:
    expected, got = run(kind, policy(policy_kind, False)), run(kind, policy(policy_kind, True))
    assert len(got) == len(expected) == 3
    if kind in ("single", "sync"):
        for batch, reference in zip(got, expected, strict=True):
            assert_same(batch, reference)
        return
    # asynchronous: which worker delivers which batch varies; a batch is matched with the
    # reference batch of the same worker and time, found by its first observation (the seeded
    # reset observation for each worker's first batch)
    matched = 0
    for batch in got:
        same_start = [r for r in expected if torch.equal(r["observation"][:, 0], batch["observation"][:, 0])]
        if same_start:
            assert_same(batch, same_start[0])
            matched += 1
    assert matched >= 2  # each worker's first batch at least


class FirstCoordinate(nn.Module):
    """Pendulum's torque from its first observation: ``[N]`` actions, without the space's ``(1,)``."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return observation[:, 0].clamp(-2.0, 2.0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tensordict_policy", [False, True], ids=["module", "tensordict"])
@pytest.mark.parametrize(("cls", "arguments"), [
    (Collector, {"num_envs": 4}),
    (MultiSyncCollector, {"num_workers": 2, "num_envs_per_worker": 2}),
    (MultiAsyncCollector, {"num_workers": 2, "num_envs_per_worker": 2}),
    (AsyncBatchedCollector, {"num_envs": 4, "envs_per_worker": 2}),
])
def test_actions_without_the_spaces_unit_dimension_are_stored_reshaped(
        cls: type, arguments: dict[str, Any], tensordict_policy: bool) -> None:
    """A policy returning ``[N]`` for a ``(1,)`` action space (TorchRL takes it): every action is
    stored as ``[..., 1]``, the value the policy chose for that env's observation."""
    policy: Any = FirstCoordinate()
    if tensordict_policy:
        policy = TensorDictModule(policy, in_keys=["observation"], out_keys=["action"])
    with cls("Pendulum-v1", policy, frames_per_batch=16, total_frames=48, seed=0, **arguments) as collector:
        batches = list(collector)
    assert len(batches) >= 3
    for batch in batches:
        action = batch["action"]
        assert action.shape[-1] == 1 and action.dtype == torch.float32
        assert torch.equal(action[..., 0], batch["observation"][..., 0].clamp(-2.0, 2.0))
