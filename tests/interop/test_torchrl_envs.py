"""A TorchRL env is accepted by every collector, and gives what TorchRL's own collector gives."""

from __future__ import annotations

import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")

from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.collectors import Collector as TorchRLCollector  # noqa: E402
from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv  # noqa: E402

from rlcollect import Collector, MultiSyncCollector  # noqa: E402
from tests.envs_for_tests import TiltPolicy  # noqa: E402


def make_env() -> TransformedEnv:
    return TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter(40))


def policy() -> TensorDictModule:
    return TensorDictModule(TiltPolicy(), in_keys=["observation"], out_keys=["action"])


@pytest.mark.parametrize("batched", [False, True])
def test_same_frames_as_torchrl_collector(batched: bool) -> None:
    def env() -> object:
        return SerialEnv(2, make_env) if batched else make_env()

    frames = 80 if batched else 40
    seeded = env()
    seeded.set_seed(3)  # before the collector's first reset, as ours does with seed=3
    theirs = TorchRLCollector(seeded, policy(), frames_per_batch=frames, total_frames=3 * frames)
    expected = [b.clone() for b in theirs]
    theirs.shutdown()
    ours = Collector(env(), policy(), frames_per_batch=frames, total_frames=3 * frames, seed=3)
    got = list(ours)
    for want, have in zip(expected, got, strict=True):
        assert have is not None
        want = want if batched else want.unsqueeze(0)
        for key in ["observation", "action", ("next", "observation"), ("next", "reward"),
                    ("next", "terminated"), ("next", "truncated"), ("next", "done")]:
            assert torch.equal(have[key], want[key].reshape(have[key].shape)), key
    done = torch.cat(got, 1)["next", "done"]  # type: ignore[arg-type]
    assert done.any()


def test_one_hot_actions_get_a_clear_error() -> None:
    with pytest.raises(TypeError, match="categorical_action_encoding=True"):
        Collector(GymEnv("CartPole-v1"), None, frames_per_batch=8)


@pytest.mark.timeout(90)
def test_torchrl_env_in_worker_processes() -> None:
    with MultiSyncCollector([make_env, make_env], policy(), frames_per_batch=20, total_frames=40,
                            seed=0) as collector:
        batches = list(collector)
    assert [b.shape for b in batches] == [torch.Size([2, 10])] * 2  # type: ignore[union-attr]
