"""The collectors of ``rlcollect.torchrl`` show TorchRL's constructor signatures, and each default
they show, passed explicitly, collects what leaving the argument out collects."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")

import torchrl.collectors as torchrl_collectors  # noqa: E402
from tensordict import TensorDictBase  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.collectors.distributed import RayCollector as TorchRLRayCollector  # noqa: E402
from torchrl.envs import GymEnv, StepCounter, TransformedEnv  # noqa: E402

from rlcollect import torchrl as wing  # noqa: E402
from tests.envs_for_tests import tilt_module  # noqa: E402

#: TorchRL's arguments the wing leaves out of a signature, and the defaults it shows otherwise.
LEFT_OUT: dict[str, set[str]] = {}
OTHER_DEFAULT = {"RayCollector": {"collector_class"}}  # TorchRL's Collector class: rlcollect's here


def make_env() -> TransformedEnv:
    return TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter(30))


def policy() -> TensorDictModule:
    return tilt_module()


@pytest.mark.parametrize("name", ["Collector", "MultiSyncCollector", "MultiAsyncCollector",
                                  "AsyncCollector", "RayCollector"])
def test_each_class_shows_torchrls_arguments_and_defaults(name: str) -> None:
    ours = inspect.signature(getattr(wing, name)).parameters
    theirs_class = (TorchRLRayCollector if name == "RayCollector"
                    # TorchRL's MultiAsyncCollector takes its MultiCollector's arguments
                    else torchrl_collectors.MultiCollector if name == "MultiAsyncCollector"
                    else getattr(torchrl_collectors, name))
    theirs = dict(inspect.signature(theirs_class.__init__).parameters)
    theirs.pop("self")
    assert list(ours)[:2] == ["create_env_fn", "policy"]
    assert ours["policy"].default is None
    assert set(theirs) - set(ours) == LEFT_OUT.get(name, set())
    differ = {n for n, p in theirs.items() if n in ours and ours[n].default != p.default}
    assert differ == OTHER_DEFAULT.get(name, set())
    assert ours["frames_per_batch"].default is inspect.Parameter.empty
    assert list(ours)[-1] == "kwargs" and ours["kwargs"].kind is inspect.Parameter.VAR_KEYWORD


def test_a_subclass_with_its_own_init_shows_its_own_signature() -> None:
    class Mine(wing.Collector):
        def __init__(self, frames: int) -> None:
            super().__init__(make_env, policy(), frames_per_batch=frames, total_frames=frames)

    assert list(inspect.signature(Mine).parameters) == ["frames"]
    assert "backend" in inspect.signature(wing.Collector).parameters


def shown_defaults(cls: type) -> dict[str, Any]:
    """Every keyword argument ``cls`` shows with a default, at that default."""
    parameters = list(inspect.signature(cls).parameters.values())[2:]
    return {p.name: p.default for p in parameters
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty}


def first_batch(cls: type, envs: Any, **kwargs: Any) -> TensorDictBase:
    torch.manual_seed(0)
    with cls(envs, policy(), frames_per_batch=20, total_frames=20, seed=3, **kwargs) as collector:
        (batch,) = list(collector)
    return batch


@pytest.mark.timeout(180)
@pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs")
@pytest.mark.parametrize("name", ["Collector", "MultiSyncCollector", "MultiAsyncCollector", "AsyncCollector"])
def test_every_default_shown_passed_explicitly_collects_the_same_batch(name: str) -> None:
    cls = getattr(wing, name)
    envs = make_env if name in ("Collector", "AsyncCollector") else [make_env, make_env]
    given = shown_defaults(cls)
    assert len(given) > 15 and given.pop("total_frames") == -1  # -1: endless; both take 20 here
    plain, explicit = first_batch(cls, envs), first_batch(cls, envs, **given)
    assert explicit.batch_size == plain.batch_size
    assert set(explicit.keys(True, True)) == set(plain.keys(True, True))
    for key in plain.keys(True, True):
        torch.testing.assert_close(explicit[key], plain[key], msg=lambda m, k=key: f"{k}: {m}")


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs")
def test_ray_collector_every_default_shown_passed_explicitly_collects_the_same_batch() -> None:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        kwargs = {"sync": True, "num_collectors": 1}
        plain = first_batch(wing.RayCollector, make_env, **kwargs)
        given = {**shown_defaults(wing.RayCollector), **kwargs}
        assert given.pop("total_frames") == -1
        explicit = first_batch(wing.RayCollector, make_env, **given)
    finally:
        ray.shutdown()
    assert explicit.batch_size == plain.batch_size
    for key in plain.keys(True, True):
        torch.testing.assert_close(explicit[key], plain[key], msg=lambda m, k=key: f"{k}: {m}")
