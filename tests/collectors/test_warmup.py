"""The random warm-up (``init_random_frames``): its frames are stamped ``policy_version`` -1 (no
version of the policy chose them) and hold 0 where the policy writes extras (a log-probability,
a value), never a value an earlier batch's policy wrote; the policy's own frames keep theirs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict.nn import TensorDictModule

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.policies.random_policy import RANDOM_VERSION
from tests.envs_for_tests import TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)

LOG_PROB = -0.7


class TiltWithLogProb(torch.nn.Module):
    """TiltPolicy's actions, with a constant log-probability beside them."""

    def __init__(self) -> None:
        super().__init__()
        self.tilt = TiltPolicy()

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tilt(observation), torch.full(observation.shape[:-1], LOG_PROB)


def policy() -> TensorDictModule:
    return TensorDictModule(TiltWithLogProb(), in_keys=["observation"],
                            out_keys=["action", "action_log_prob"])


def build(kind: str, **options: Any) -> Any:
    """A collector of ``kind`` with 4 envs and batches of 4 x 10 frames (2 x 10 for asynchronous ones)."""
    common = {"total_frames": 160, "seed": 0, **options}
    if kind == "single":
        return Collector(make_cartpole, policy(), num_envs=4, frames_per_batch=40, **common)
    if kind == "batched":
        return AsyncBatchedCollector(make_cartpole, policy(), num_envs=4, envs_per_worker=2,
                                     frames_per_batch=20, **common)
    cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
    return cls(make_cartpole, policy(), num_workers=2, num_envs_per_worker=2,
               frames_per_batch=40 if kind == "sync" else 20, **common)


@pytest.mark.parametrize("kind", ["single", "sync", "async", "batched"])
def test_warm_up_frames_are_stamped_minus_one_with_zero_extras(kind: str) -> None:
    with build(kind, init_random_frames=40) as collector:
        batches = [batch.clone() for batch in collector]
    random_frames = policy_frames = 0
    for batch in batches:
        version, log_prob = batch["policy_version"], batch["action_log_prob"]
        assert version.dtype == torch.int64 and version.shape == log_prob.shape == batch.shape
        warm = version == RANDOM_VERSION
        assert ((version == 0) | warm).all()
        assert (log_prob[warm] == 0).all() and (log_prob[~warm] == LOG_PROB).all()
        random_frames += int(warm.sum())
        policy_frames += int((~warm).sum())
        assert warm.all() or not warm.any()  # a batch is random as a whole
    assert random_frames == 40 and policy_frames == 120


def test_a_random_batch_after_policy_batches_keeps_none_of_their_extras() -> None:
    with build("single") as collector:
        iterator = iter(collector)
        first = next(iterator).clone()
        collector.init_random_frames = 10**9  # the warm-up again (as a nested collector's parent asks)
        second = next(iterator).clone()
    assert (first["action_log_prob"] == LOG_PROB).all() and (first["policy_version"] == 0).all()
    assert (second["action_log_prob"] == 0).all() and (second["policy_version"] == RANDOM_VERSION).all()
