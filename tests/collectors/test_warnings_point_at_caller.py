"""A warning about what you passed or did names your line (``warning.filename`` is the file that
called rlcollect), not the line deep in the package where the check runs."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest
import torch
from torch import nn

import rlcollect.torchrl as rl_torchrl
from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector

pytestmark = pytest.mark.timeout(120)


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


class _Unpicklable(gym.Wrapper):
    """CartPole holding something that is not data (a lock, as a simulator handle or a socket)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.handle = threading.Lock()


class _NoParameters(nn.Module):
    """Always pushes left; nothing to move to a device."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.zeros(observation.shape[0], dtype=torch.long)


def _rounded(kind: type) -> Any:
    if kind is Collector:
        return Collector("CartPole-v1", None, frames_per_batch=10, total_frames=30, num_envs=3)
    return kind([_cartpole, _cartpole], None, frames_per_batch=10, total_frames=30, num_envs_per_worker=3)


def _old_weights_keyword() -> Any:
    collector = Collector("Pendulum-v1", nn.Linear(3, 1), frames_per_batch=4, total_frames=8)
    collector.update_policy_weights_(policy_weights=dict(nn.Linear(3, 1).state_dict()))
    return collector


def _unpicklable_envs() -> Any:
    collector = Collector(lambda: _Unpicklable(_cartpole()), None, frames_per_batch=4, total_frames=8)
    collector.state_dict()
    return collector


CASES: dict[str, tuple[Callable[[], Any], str]] = {
    "frames_per_batch rounded, Collector": (lambda: _rounded(Collector), "not a multiple"),
    "frames_per_batch rounded, MultiSync": (lambda: _rounded(MultiSyncCollector), "not a multiple"),
    "total_frames rounded, Collector": (lambda: _total_rounded("Collector"), "total_frames=100"),
    "total_frames rounded, MultiAsync": (lambda: _total_rounded("MultiAsync"), "total_frames=100"),
    "policy_weights= keyword": (_old_weights_keyword, "deprecated"),
    "envs whose state is not data": (_unpicklable_envs, "envs' state is not data"),
    "policy_device, no parameters": (
        lambda: rl_torchrl.Collector(_cartpole, _NoParameters(), frames_per_batch=4, total_frames=8,
                                     policy_device="cpu"), "no parameter or buffer"),
    "trajs_per_batch without traj_format": (
        lambda: rl_torchrl.Collector(_cartpole, None, frames_per_batch=4, total_frames=8, trajs_per_batch=2),
        "traj_format"),
    "DataCollectorBase": (lambda: _subclass_of_old_base()(), "deprecated"),
}


def _subclass_of_old_base() -> type:
    class Mine(rl_torchrl.DataCollectorBase):
        def __init__(self) -> None:
            pass

        def iterator(self) -> Any:
            yield from ()

        def set_seed(self, seed: int, static_seed: bool = False) -> int:
            return seed

        def state_dict(self) -> dict[str, Any]:
            return {}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            pass

        def shutdown(self, timeout: float | None = None, close_env: bool = True,
                     raise_on_error: bool = True) -> None:
            pass

    return Mine


@pytest.mark.parametrize("case", list(CASES))
def test_warning_names_the_callers_line(case: str) -> None:
    build, words = CASES[case]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collector = build()
    try:
        ours = [w for w in caught if words in str(w.message)]
        assert ours, f"no warning saying {words!r}: {[str(w.message) for w in caught]}"
        assert [w.filename for w in ours] == [__file__] * len(ours), [(w.filename, w.lineno) for w in ours]
    finally:
        shutdown = getattr(collector, "shutdown", None)
        if shutdown is not None:
            shutdown()


def _total_rounded(kind: str) -> Any:
    """100 frames in batches of 30: every collector collects 4 whole batches, 120 frames."""
    if kind == "Collector":
        return Collector("CartPole-v1", None, frames_per_batch=30, total_frames=100)
    if kind == "AsyncBatched":
        return AsyncBatchedCollector("CartPole-v1", _NoParameters(), frames_per_batch=30, total_frames=100,
                                     num_envs=2)
    sync = kind == "MultiSync"
    return (MultiSyncCollector if sync else MultiAsyncCollector)(
        "CartPole-v1", None, frames_per_batch=30, total_frames=100, num_workers=2)


@pytest.mark.parametrize("kind", ["Collector", "MultiSync", "MultiAsync", "AsyncBatched"])
def test_total_frames_rounded_up_to_whole_batches_is_said_and_collected(kind: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collector = _total_rounded(kind)
    with collector:
        said = [str(w.message) for w in caught if "total_frames" in str(w.message)]
        assert said == ["total_frames=100 is not a multiple of the 30 frames of a batch: 120 frames "
                        "(4 batches) will be collected"], [str(w.message) for w in caught]
        assert [w.filename for w in caught if "total_frames" in str(w.message)] == [__file__]
        assert [batch.numel() for batch in collector] == [30] * 4


def _by_sign(observation: torch.Tensor) -> torch.Tensor:
    """A policy without weights: push towards the pole's side."""
    return (observation[..., 2] > 0).long()


@pytest.mark.parametrize("kind", ["Collector", "MultiSync", "MultiAsync", "AsyncBatched"])
def test_updating_a_policy_without_weights_does_nothing_and_says_so_once(kind: str) -> None:
    """As in TorchRL: no weights, nothing to send (it used to raise ``unknown model id 'policy';
    known: []``); an update with weights given is still refused."""
    common: dict[str, Any] = {"frames_per_batch": 16, "total_frames": 32}
    if kind == "Collector":
        collector: Any = Collector("CartPole-v1", _by_sign, **common)
    elif kind == "AsyncBatched":
        collector = AsyncBatchedCollector("CartPole-v1", _by_sign, num_envs=2, **common)
    else:
        cls = MultiSyncCollector if kind == "MultiSync" else MultiAsyncCollector
        collector = cls("CartPole-v1", _by_sign, num_workers=2, **common)
    with collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collector.update_policy_weights_()
        collector.update_policy_weights_()
        said = [w for w in caught if "the policy has no weights" in str(w.message)]
        assert [w.filename for w in said] == [__file__], [str(w.message) for w in caught]
        with pytest.raises(KeyError, match="unknown model id"):
            collector.update_policy_weights_(nn.Linear(4, 2).state_dict())
        batches = list(collector)
    assert sum(batch.numel() for batch in batches) == 32
    for batch in batches:  # the policy acted: its action is the sign of the pole's angle
        assert torch.equal(batch["action"].long(), (batch["observation"][..., 2] > 0).long())
