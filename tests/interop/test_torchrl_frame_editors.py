"""Every entry a TorchRL env's step returns is in the batch, or the collector says which is not:
transforms that edit each stored frame after its step (TorchRL's ``NextObservationDelta``, which
writes ``("next", "delta", "observation")`` and drops ``("next", "observation")``, none of it in
the specs) are stepped tensordict by tensordict, giving TorchRL's collector's batches; an entry
no spec declares is an error naming it, never dropped."""

from __future__ import annotations

from typing import Any

import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")

from tensordict import TensorDictBase  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.envs import GymEnv, NextObservationDelta, StepCounter, Transform, TransformedEnv  # noqa: E402

import rlcollect  # noqa: E402
import rlcollect.torchrl  # noqa: E402
from rlcollect.data.checks import BadDataError  # noqa: E402
from tests.envs_for_tests import TiltPolicy  # noqa: E402

pytestmark = [pytest.mark.timeout(120),  # the policy's InitTracker: TorchRL 0.14 warns as rlcollect does
              pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs:FutureWarning")]


def delta_env() -> Any:
    env = TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter(30))
    env.append_transform(NextObservationDelta())
    env.set_seed(3)
    return env


def policy() -> TensorDictModule:
    return TensorDictModule(TiltPolicy(), in_keys=["observation"], out_keys=["action"])


def batches(cls: type, env: Any, count: int = 3, **kwargs: Any) -> list[TensorDictBase]:
    collector = cls(env, policy(), frames_per_batch=40, total_frames=40 * count, **kwargs)
    try:
        return [batch.clone() for batch in collector]
    finally:
        collector.shutdown()


@pytest.mark.parametrize("name", ["Collector", "MultiAsyncCollector"])
def test_next_observation_delta_gives_torchrl_collectors_batches(name: str) -> None:
    import torchrl.collectors

    env: Any = delta_env if name == "Collector" else [delta_env]
    ours = batches(getattr(rlcollect.torchrl, name), env)
    theirs = batches(getattr(torchrl.collectors, name), env)
    for mine, ref in zip(ours, theirs, strict=True):
        assert ("next", "delta", "observation") in ref.keys(True, True)
        assert set(mine.keys(True, True)) == set(ref.keys(True, True))
        for key in ref.keys(True, True):
            torch.testing.assert_close(mine[key], ref[key], msg=f"{key}")


def test_the_native_collector_keeps_the_delta_too() -> None:
    (batch,) = batches(rlcollect.Collector, delta_env, count=1)
    delta = batch["next", "delta", "observation"]
    assert delta.dtype == torch.float16 and delta.shape == batch["observation"].shape
    within = ~batch["next", "done"][:-1, 0]  # the step's change, where no reset comes between
    expected = (batch["observation"][1:] - batch["observation"][:-1]).half()
    torch.testing.assert_close(delta[:-1][within], expected[within], atol=1e-2, rtol=1e-2)


class Undeclared(Transform):
    """Writes ``("next", "hint")`` at every step without declaring it in any spec."""

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        next_tensordict.set("hint", torch.ones(()))
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return tensordict_reset


def undeclared_env() -> Any:
    return TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), Undeclared())


@pytest.mark.parametrize("cls", [rlcollect.Collector, rlcollect.torchrl.Collector,
                                 rlcollect.MultiSyncCollector])
def test_an_entry_no_spec_declares_is_an_error_naming_it(cls: type) -> None:
    workers = {"num_workers": 2, "max_worker_restarts": 0} if cls is rlcollect.MultiSyncCollector else {}
    collector = cls(undeclared_env, policy(), frames_per_batch=8, **workers)
    try:
        with pytest.raises(BadDataError, match=r"entries \('hint',\) of 'next'.* not in the env's specs"):
            collector.next()
    finally:
        collector.shutdown(raise_on_error=False)
