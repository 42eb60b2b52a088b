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
