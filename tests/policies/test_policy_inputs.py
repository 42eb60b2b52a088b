"""A policy gets an observation of its own at each step, as in a hand-written loop: the inputs it
keeps (a frame history, the previous observation) still hold their own step's values at later
steps and batches. In every collector, for a module and a TensorDict policy.

:class:`KeepsInputs` keeps every observation it is given and acts with the number of kept ones
that changed since (a Box action): the batch's actions must all be zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.policies.adapter import reads_input_only

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


def test_which_policies_read_their_input_only() -> None:
    """Only exactly a read-only layer first (in ``Sequential``s), with no forward hook, is handed
    the batch's own view of the observations; any other policy gets its own copy."""
    linear = nn.Linear(4, 2)
    assert reads_input_only(linear) and reads_input_only(nn.Sequential(nn.Sequential(linear), nn.ReLU()))
    assert reads_input_only(nn.Sequential(nn.Conv2d(1, 1, 1))) and reads_input_only(nn.LayerNorm(4))

    class Edits(nn.Linear):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return super().forward(obs.mul_(2))

    with_forward = nn.Linear(4, 2)
    with_forward.forward = lambda obs: obs  # type: ignore[method-assign]
    for policy in (nn.Sequential(), nn.Sequential(nn.Flatten(), linear), nn.Sequential(nn.ReLU(inplace=True)),
                   Edits(4, 2), with_forward, KeepsInputs(), lambda obs: obs):
        assert not reads_input_only(policy), policy
    hooked = nn.Linear(4, 2)
    handle = hooked.register_forward_pre_hook(lambda module, args: None)
    assert not reads_input_only(hooked) and not reads_input_only(nn.Sequential(hooked))
    handle.remove()
    outer = nn.Sequential(hooked)
    outer.register_forward_hook(lambda module, args, out: None)  # it gets the input too
    assert not reads_input_only(outer) and reads_input_only(hooked)
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)
    try:
        assert not reads_input_only(hooked)
    finally:
        handle.remove()
    assert reads_input_only(hooked)


def reference_observations(steps: int) -> torch.Tensor:
    """CartPole's observations from a plain loop seeded 0, always pushing left (action 0)."""
    import gymnasium as gym

    env, rows = gym.make("CartPole-v1"), []
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            obs, _ = env.reset()
    return torch.as_tensor(np.array(rows))


def test_a_hook_that_writes_into_the_input_gets_a_copy_even_if_added_later() -> None:
    """A read-only first layer reads the batch's view; a pre-hook that zeroes its input in place,
    there from the start or registered between batches, edits a copy: the stored observations
    stay the env's (compared with a plain loop), batch after batch."""
    first = nn.Linear(4, 2)

    def zero_input(module: nn.Module, args: tuple[torch.Tensor]) -> None:
        args[0].zero_()

    policy = nn.Sequential(first, nn.Tanh(), Pushes())
    expected = reference_observations(3 * 20)
    for hook_from_start in (True, False):
        handle = first.register_forward_pre_hook(zero_input) if hook_from_start else None
        with Collector("CartPole-v1", policy, frames_per_batch=20, total_frames=60, seed=0) as collector:
            batches = []
            for batch in collector:
                batches.append(batch["observation"][0].clone())
                if handle is None:
                    handle = first.register_forward_pre_hook(zero_input)
        handle.remove()
        assert torch.equal(torch.cat(batches), expected)
    with Collector("CartPole-v1", policy, frames_per_batch=20, total_frames=20, seed=0) as collector:
        assert torch.equal(next(iter(collector))["observation"][0], expected[:20])  # the view, read only


class Pushes(nn.Module):
    """Any input ``[N, k] -> [N]``: action 0 (push left) for every env."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], dtype=torch.int64)
