"""A policy edited in place between batches (an optimizer step without ``update_policy_weights_()``):
the frames it then chooses are stamped with a new version, in a collector that runs the module
itself; collectors that run copies keep acting, and stamping, with the weights they were sent."""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.weights import StaleWeightsWarning

pytestmark = pytest.mark.timeout(120)


class Constant(nn.Module):
    """Pendulum actions equal to its one parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.zeros(observation.shape[0], 1) + self.w


def _batches(collector, edits):
    """One batch per entry of ``edits``, each edit applied after its batch (as a learner between
    batches); each batch as the (actions, versions) it holds."""
    seen = []
    for batch, edit in zip(collector, edits, strict=False):
        seen.append((batch["action"].unique().tolist(), batch["policy_version"].unique().tolist()))
        if edit is not None:
            edit()
    return seen


def _step(policy: Constant, value: float):
    def edit() -> None:
        optimizer = torch.optim.SGD(policy.parameters(), lr=1.0)
        policy.w.grad = torch.full((1,), -value)
        optimizer.step()  # w += value, as a learner's step
    return edit


def test_an_optimizer_step_without_an_update_starts_a_new_version() -> None:
    policy = Constant()
    with Collector("Pendulum-v1", policy, frames_per_batch=8, total_frames=32, num_envs=2) as collector:
        seen = _batches(collector, [_step(policy, 1.0), None, _step(policy, 0.5), None])
    # the batch after each step acts with the new weights, under a new version; one without a
    # step keeps the version (a reference loop: versions counted by hand)
    assert seen == [([0.0], [0]), ([1.0], [1]), ([1.0], [1]), ([1.5], [2])]


def test_a_step_then_an_update_is_one_version() -> None:
    policy = Constant()
    with Collector("Pendulum-v1", policy, frames_per_batch=8, total_frames=24, num_envs=2) as collector:
        def step_and_update() -> None:
            _step(policy, 1.0)()
            collector.update_policy_weights_()
        seen = _batches(collector, [step_and_update, step_and_update, None])
    assert seen == [([0.0], [0]), ([1.0], [1]), ([2.0], [2])]
    assert collector.stats().policy_version == 2


def test_explicit_weights_are_one_version() -> None:
    policy, trained = Constant(), Constant()
    trained.w.data.fill_(0.25)
    with Collector("Pendulum-v1", policy, frames_per_batch=8, total_frames=16, num_envs=2) as collector:
        seen = _batches(collector, [lambda: collector.update_policy_weights_(trained), None])
    assert seen == [([0.0], [0]), ([0.25], [1])]


def test_a_tensordict_policy_edited_in_place() -> None:
    module = TensorDictModule(Constant(), in_keys=["observation"], out_keys=["action"])
    with Collector("Pendulum-v1", module, frames_per_batch=8, total_frames=16, num_envs=2) as collector:
        seen = _batches(collector, [_step(module.module, 2.0), None])
    assert seen == [([0.0], [0]), ([2.0], [1])]


def test_a_policy_that_writes_no_parameter_keeps_its_version() -> None:
    """A module whose forward updates a buffer (a running mean) is not edited by a learner."""

    class Counting(Constant):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, observation: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return super().forward(observation)

    with Collector("Pendulum-v1", Counting(), frames_per_batch=8, total_frames=24, num_envs=2) as collector:
        seen = _batches(collector, [None, None, None])
    assert seen == [([0.0], [0])] * 3


def test_worker_copies_take_edits_only_with_an_update() -> None:
    policy = Constant()
    with MultiSyncCollector("Pendulum-v1", policy, num_workers=2, frames_per_batch=8, total_frames=24,
                            start_method="fork") as collector:
        seen = _batches(collector, [_step(policy, 1.0), lambda: collector.update_policy_weights_(), None])
    # the workers act with the weights they were sent: the step reaches them with the update
    assert seen == [([0.0], [0]), ([0.0], [0]), ([1.0], [1])]


def _collect(collector, edits):
    for _, edit in zip(collector, edits, strict=False):
        if edit is not None:
            edit()


@pytest.mark.parametrize("kind", ["sync", "async", "batched"])
def test_copies_never_sent_an_edit_warn_once(kind: str) -> None:
    policy = Constant()
    common = {"frames_per_batch": 8, "total_frames": 8 * 14}
    collector = {
        "sync": lambda: MultiSyncCollector("Pendulum-v1", policy, num_workers=2, **common),
        "async": lambda: MultiAsyncCollector("Pendulum-v1", policy, num_workers=2, **common),
        "batched": lambda: AsyncBatchedCollector("Pendulum-v1", policy, num_envs=2, **common),
    }[kind]()
    with collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _collect(collector, [_step(policy, 0.1)] * 14)  # a learner that never sends its weights
    stale = [w for w in caught if w.category is StaleWeightsWarning]
    assert len(stale) == 1, [str(w.message) for w in caught]
    assert "update_policy_weights_()" in str(stale[0].message)
    assert stale[0].filename == __file__  # said where your loop asked for the batch


def test_no_warning_once_weights_were_sent_or_without_edits() -> None:
    policy = Constant()
    every_third = [_step(policy, 0.1), _step(policy, 0.1), lambda: collector.update_policy_weights_()] * 5
    with MultiSyncCollector("Pendulum-v1", policy, num_workers=2, frames_per_batch=8,
                            total_frames=8 * 15) as collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _collect(collector, every_third)
        assert collector.stats().policy_version == 5
    with MultiSyncCollector("Pendulum-v1", Constant(), num_workers=2, frames_per_batch=8,
                            total_frames=8 * 15) as untouched, warnings.catch_warnings(record=True) as more:
        warnings.simplefilter("always")
        _collect(untouched, [None] * 15)
    assert not [w for w in [*caught, *more] if w.category is StaleWeightsWarning]


def test_a_device_copy_never_sent_an_edit_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the Collector acts with a copy of your module (on another policy_device: simulated
    here by a copy on the CPU), your edits reach it with update_policy_weights_(), as workers'."""
    import copy

    import rlcollect.policies.module_policy as module_policy

    monkeypatch.setattr(module_policy, "on_device", lambda module, device: copy.deepcopy(module))
    policy = Constant()
    with Collector("Pendulum-v1", policy, frames_per_batch=8, total_frames=8 * 12,
                   num_envs=2) as collector, warnings.catch_warnings(record=True) as caught:
        assert collector.policy is not policy
        warnings.simplefilter("always")
        seen = _batches(collector, [_step(policy, 1.0)] * 12)
    assert seen[-1] == ([0.0], [0])  # the copy acts with the weights it started with
    stale = [w for w in caught if w.category is StaleWeightsWarning]
    assert len(stale) == 1 and "a copy on policy_device" in str(stale[0].message)
    policy = Constant()
    with Collector("Pendulum-v1", policy, frames_per_batch=8, total_frames=8 * 12,
                   num_envs=2) as collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = _batches(collector, [_step(policy, 1.0), lambda: collector.update_policy_weights_()] * 6)
    assert seen[:3] == [([0.0], [0]), ([0.0], [0]), ([1.0], [1])]  # the step acts once it is sent
    assert not [w for w in caught if w.category is StaleWeightsWarning]
