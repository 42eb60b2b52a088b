"""A TorchRL env is never pickled into a state_dict: a collector that loads one goes on with its
own env's episode under a new trajectory id, as TorchRL's collector does, and never pairs the
saved env's observation with a step of its own env."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")

from tensordict import TensorDictBase  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.envs import GymEnv, StepCounter, TransformedEnv  # noqa: E402
from torchrl.testing.mocking_classes import CountingEnvCountPolicy, NestedCountingEnv  # noqa: E402

import rlcollect.torchrl  # noqa: E402
from tests.envs_for_tests import TiltPolicy, resumed_beside_fresh  # noqa: E402

pytestmark = [pytest.mark.timeout(120),  # the policy's InitTracker: TorchRL 0.14 warns as rlcollect does
              pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs:FutureWarning")]


def make_env() -> Any:
    env = TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter(30))
    env.set_seed(5)
    return env


def policy() -> TensorDictModule:
    return TensorDictModule(TiltPolicy(), in_keys=["observation"], out_keys=["action"])


def resumed(module: Any) -> list[TensorDictBase]:
    """Two batches, the state, a new collector loading it, two more batches."""
    first = module.Collector(make_env, policy(), frames_per_batch=20, total_frames=200)
    batches = [batch.clone() for _, batch in zip(range(2), first, strict=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = first.state_dict()
    first.shutdown()
    second = module.Collector(make_env, policy(), frames_per_batch=20, total_frames=200)
    second.load_state_dict(state)
    batches += [batch.clone() for _, batch in zip(range(2), second, strict=False)]
    second.shutdown()
    return batches


def test_resume_gives_torchrl_collectors_batches() -> None:
    import torchrl.collectors

    ours, theirs = resumed(rlcollect.torchrl), resumed(torchrl.collectors)
    for mine, ref in zip(ours, theirs, strict=True):
        assert set(mine.keys(True, True)) == set(ref.keys(True, True))
        for key in ref.keys(True, True):
            torch.testing.assert_close(mine[key], ref[key], msg=f"{key}")
    # the env's own episode from its reset, under an id the saved run did not hand out
    assert ours[2]["step_count"][0].item() == 0
    assert ours[2]["collector", "traj_ids"][0] > ours[1]["collector", "traj_ids"].max()


def test_an_env_the_buffers_do_not_hold_resumes_from_its_own_root() -> None:
    def build() -> Any:
        env = NestedCountingEnv(batch_size=(2,), max_steps=50, nested_dim=3)
        return rlcollect.Collector(env, CountingEnvCountPolicy(env.full_action_spec[env.action_key],
                                                                env.action_key), frames_per_batch=8)

    before, batch, reference, _ = resumed_beside_fresh(build, 2)
    for key in reference.keys(True, True):
        if key != ("collector", "traj_ids"):
            torch.testing.assert_close(batch[key], reference[key], msg=f"{key}")
    assert batch["collector", "traj_ids"].min() > before[-1]["collector", "traj_ids"].max()


def test_a_state_dict_of_a_torchrl_env_does_not_warn() -> None:
    """TorchRL envs are never in the state (by design, as in TorchRL's): a trainer checkpointing
    its collector every few batches is not told so each time."""
    with rlcollect.torchrl.Collector(make_env, policy(), frames_per_batch=20) as collector:
        collector.next()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            state = collector.state_dict()
    assert state["rollout"]["frames"] == 20
