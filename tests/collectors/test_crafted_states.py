"""A state is data: it loads with ``torch.load(weights_only=True)``, and a crafted one (pickle bytes
where the envs' state goes, as states held before they were data) is refused by every collector's
``load_state_dict`` with no code run, in the parent or in a worker."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from tests.envs_for_tests import Payload, TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)


def build(kind: str) -> Any:
    common: dict[str, Any] = {"frames_per_batch": 16, "seed": 0}
    if kind == "Collector":
        return Collector(make_cartpole, TiltPolicy(), num_envs=2, **common)
    if kind == "AsyncBatchedCollector":
        return AsyncBatchedCollector(make_cartpole, TiltPolicy(), num_envs=2, **common)
    cls = MultiSyncCollector if kind == "MultiSyncCollector" else MultiAsyncCollector
    return cls([make_cartpole, make_cartpole], TiltPolicy(), **common)


def through_disk(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def env_states(state: Any) -> list[dict[str, Any]]:
    """Every envs' state in a collector's state (the mappings holding ``"steps"`` and ``"envs"``)."""
    if isinstance(state, dict):
        found = [state] if {"steps", "envs"} <= set(state) else []
        return found + [inner for value in state.values() for inner in env_states(value)]
    if isinstance(state, (list, tuple)):
        return [inner for value in state for inner in env_states(value)]
    return []


KINDS = ["Collector", "MultiSyncCollector", "MultiAsyncCollector", "AsyncBatchedCollector"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_with_pickled_envs_is_refused_and_runs_nothing(kind: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with build(kind) as collector:
        collector.next()
        state = through_disk(collector.state_dict())
        found = env_states(state)
        assert found and all(isinstance(envs["envs"], dict) for envs in found)  # the envs, as data
        for envs in found:
            envs["envs"] = pickle.dumps(Payload(marker))
        state = through_disk(state)  # bytes pass weights_only: the reader must not unpickle them
    with build(kind) as resumed:
        with pytest.raises(ValueError, match="never unpickles"):
            resumed.load_state_dict(state)
        assert resumed.next() is not None  # the refused state left the collector usable
    assert not marker.exists()


def test_a_state_is_plain_data_all_the_way_down() -> None:
    """Only tensors, numbers, strings, bytes, bools, None, lists and dicts: no other class."""
    allowed = (torch.Tensor, int, float, str, bytes, bool, type(None))

    def classes(value: Any) -> set[str]:
        if isinstance(value, dict):
            return {c for k, v in value.items() for c in classes(k) | classes(v)}
        if isinstance(value, (list, tuple)):
            return {c for v in value for c in classes(v)}
        return set() if isinstance(value, allowed) else {type(value).__name__}

    with build("Collector") as collector:
        collector.next()
        assert classes(collector.state_dict()) == set()


def test_a_refused_env_state_changes_nothing() -> None:
    """A state whose last env is of another class: refused, and the collector goes on exactly as a
    twin that was never given it (its counters, its envs, its next batch)."""
    with build("Collector") as saved:
        for _ in range(2):
            saved.next()
        state = saved.state_dict()
    last = state["rollout"]["envs"]["envs"]["items"][-1]
    while "env" in last["attrs"]:
        last = last["attrs"]["env"]
    last["class"] = "gymnasium.envs.classic_control.pendulum.PendulumEnv"
    with build("Collector") as refusing, build("Collector") as twin:
        refusing.next()
        twin.next()
        before = refusing.state_dict()["rollout"]["frames"]
        with pytest.raises(ValueError, match="PendulumEnv in the state"):
            refusing.load_state_dict(state)
        assert refusing.state_dict()["rollout"]["frames"] == before
        ours, theirs = refusing.next(), twin.next()
        assert torch.equal(ours["observation"], theirs["observation"])
        assert torch.equal(ours["next", "reward"], theirs["next", "reward"])
