"""``split_trajs=True`` in rlcollect.torchrl gives TorchRL's split batches: the same trajectories, in
the same rows (TorchRL orders them as they first appear, env by env), the same padding and mask."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("torchrl")
pytestmark = [  # TorchRL's advisories, which both collectors give alike here
    pytest.mark.filterwarnings("ignore:split_trajs=True produces:UserWarning"),
    pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs:FutureWarning"),
]

from tensordict import TensorDictBase  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.collectors import Collector as TorchRLCollector  # noqa: E402
from torchrl.collectors import MultiSyncCollector as TorchRLMultiSync  # noqa: E402
from torchrl.envs import EnvBase, GymEnv, SerialEnv, StepCounter, TransformedEnv  # noqa: E402

from rlcollect.torchrl import Collector, MultiSyncCollector  # noqa: E402
from tests.envs_for_tests import tilt_module  # noqa: E402


def short_cartpole() -> EnvBase:
    """CartPole cut at 7 steps, seeded in the factory: both collectors see the same episodes."""
    env = TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter(7))
    env.set_seed(3)
    return env


def two_cartpoles() -> EnvBase:
    return SerialEnv(2, short_cartpole)


def policy() -> TensorDictModule:
    return tilt_module()


def first_batch(cls: Any, env: Any, frames: int, **kwargs: Any) -> TensorDictBase:
    collector = cls(env, policy(), frames_per_batch=frames, total_frames=frames, split_trajs=True, **kwargs)
    try:
        return next(iter(collector)).clone()
    finally:
        collector.shutdown()


def assert_same_split(got: TensorDictBase, want: TensorDictBase) -> None:
    assert got.batch_size == want.batch_size
    assert got["collector", "mask"].sum() < got["collector", "mask"].numel()  # some rows are padded
    for key in ("observation", "action", ("next", "observation"), ("next", "reward"), ("next", "done"),
                ("next", "step_count"), ("collector", "mask")):
        assert torch.equal(got[key], want[key]), key


@pytest.mark.timeout(120)
def test_split_trajs_of_a_batched_env_as_torchrl() -> None:
    want = first_batch(TorchRLCollector, two_cartpoles, 30)
    got = first_batch(Collector, two_cartpoles, 30)
    assert got.batch_size == (6, 7)
    assert_same_split(got, want)


@pytest.mark.timeout(240)
def test_split_trajs_of_a_synchronous_batch_as_torchrl() -> None:
    want = first_batch(TorchRLMultiSync, [short_cartpole] * 2, 20, cat_results="stack")
    got = first_batch(MultiSyncCollector, [short_cartpole] * 2, 20, cat_results="stack")
    assert got.batch_size == (4, 7)
    assert_same_split(got, want)


def counting_agents() -> EnvBase:
    """Two agents whose observations, actions and done flags are nested under ``"agents"``: a
    TorchRL env the batch buffers do not hold (its batches are its own TensorDicts)."""
    from torchrl.testing.mocking_classes import MultiAgentCountingEnv

    env = MultiAgentCountingEnv(n_agents=2, max_steps=6)
    env.set_seed(3)
    return env


def counting_nested() -> EnvBase:
    from torchrl.testing.mocking_classes import NestedCountingEnv

    env = NestedCountingEnv(max_steps=6)
    env.set_seed(3)
    return env


class ZeroActions(torch.nn.Module):
    """Writes the zero action under each of the env's action keys."""

    def __init__(self, env: EnvBase) -> None:
        super().__init__()
        self.spec = env.full_action_spec.clone()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.update(self.spec.zero())


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("make_env", "shape"), [(counting_agents, (3, 7)), (counting_nested, (1, 20))],
                         ids=["agents", "nested"])
def test_split_trajs_of_an_env_the_buffers_do_not_hold_as_torchrl(make_env: Any,
                                                                  shape: tuple[int, int]) -> None:
    """rlcollect's Collector refused split_trajs for these envs; TorchRL's splits them."""
    batches = []
    for cls in (TorchRLCollector, Collector):
        torch.manual_seed(0)
        collector = cls(make_env, ZeroActions(make_env()), frames_per_batch=20, total_frames=20,
                        split_trajs=True)
        try:
            batches.append(next(iter(collector)).clone())
        finally:
            collector.shutdown()
    want, got = batches
    assert got.batch_size == want.batch_size == shape  # the agents': two episodes of 7 and a part of 6
    assert set(got.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True, True):
        assert torch.equal(got[key], want[key]), key
