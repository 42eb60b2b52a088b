"""An env's state as data: a round trip through ``torch.load(weights_only=True)`` continues the env
exactly (compared step by step with the env it was taken of), and a state that is not data, or of
other envs, is refused before anything changes."""

from __future__ import annotations

import collections
import io
import random
import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect.envs.env_state import NotData, capture, restore

pytestmark = pytest.mark.timeout(60)


def through_disk(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def played(env: gym.Env[Any, Any], steps: int) -> list[tuple[list[float], float, bool, bool]]:
    """``steps`` steps with actions from the env's own action space, resetting where episodes end."""
    out = []
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        out.append((np.asarray(obs, dtype=np.float64).ravel().tolist(), float(reward), bool(terminated),
                    bool(truncated)))
        if terminated or truncated:
            env.reset()
    return out


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0",
                                    "FrozenLake-v1", "Blackjack-v1"])
def test_a_restored_env_continues_as_the_one_it_was_taken_of(env_id: str) -> None:
    env, twin = gym.make(env_id), gym.make(env_id)
    env.reset(seed=0)
    env.action_space.seed(1)
    twin.reset(seed=99)
    played(env, 7)
    restore(twin, through_disk(capture(env)))
    assert played(twin, 300) == played(env, 300)


def test_generators_of_every_kind_and_containers_round_trip() -> None:
    class Holder:
        def __init__(self) -> None:
            self.pcg = np.random.default_rng(1)
            self.mt = np.random.Generator(np.random.MT19937(2))
            self.legacy = np.random.RandomState(3)
            self.py = random.Random(4)
            self.torch = torch.Generator().manual_seed(5)
            self.queue: collections.deque[float] = collections.deque([1.0, 2.0], maxlen=3)
            self.table = {"a": np.arange(3, dtype=np.int16), 2: (np.float32(1.5), "x", None)}
            self.shared = self.table["a"]  # one array held twice stays one array

    def draws(h: Holder) -> list[Any]:
        return [h.pcg.random(), h.mt.random(), h.legacy.rand(), h.py.random(),
                torch.rand(1, generator=h.torch).item(), list(h.queue), h.table["a"].tolist(),
                h.table[2][0].item(), h.shared is h.table["a"]]

    saved, live = Holder(), Holder()
    for generator in (live.pcg, live.mt):
        generator.random(10)
    live.queue.append(9.0)
    live.table["a"][:] = 7
    state = through_disk(capture(saved))
    restore(live, state)
    assert draws(live) == draws(saved)


def test_what_is_not_data_is_named_by_its_path() -> None:
    env = gym.make("CartPole-v1")
    env.unwrapped.handle = threading.Lock()  # type: ignore[attr-defined]
    with pytest.raises(NotData, match=r"env(\.env)+\.handle is a _thread\.lock"):
        capture(env)
    with pytest.raises(NotData, match="dtype object"):
        capture({"x": np.array([object()])})


def _state_with(change: Any) -> tuple[gym.Env[Any, Any], Any, list[float]]:
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    state = capture(env)
    change(state)
    before = env.unwrapped.state.tolist()  # type: ignore[attr-defined]
    return env, state, before


def _inner(state: Any) -> Any:
    while "env" in state["attrs"]:
        state = state["attrs"]["env"]
    return state


def _set(name: str, value: Any) -> Any:
    """A change setting the CartPole state's attribute ``name`` to ``value``."""
    return lambda state: _inner(state)["attrs"].__setitem__(name, value)


PENDULUM = "gymnasium.envs.classic_control.pendulum.PendulumEnv"
CRAFTED = {
    "another env": (lambda s: _inner(s).__setitem__("class", PENDULUM), "PendulumEnv in the state"),
    "unknown kind": (_set("state", {"kind": "pickle", "data": b"c"}), "kind 'pickle' is not one"),
    "object dtype": (lambda s: _inner(s)["attrs"]["state"].__setitem__("dtype", "|O"),
                     "dtype object is not data"),
    "unknown bit generator": (lambda s: _inner(s)["attrs"]["_np_random"].__setitem__("bit_generator", "os"),
                              "bit generator 'os'"),
    "a bare object": (_set("state", object()), "object is not an env state"),
    "a reference ahead": (_set("state", {"kind": "same", "path": "env.nowhere"}), "refers to 'env.nowhere'"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_state_is_refused_and_the_env_is_unchanged(case: str) -> None:
    change, words = CRAFTED[case]
    env, state, before = _state_with(change)
    env.step(0)  # the env moves on: a refused restore must not move it back
    moved = env.unwrapped.state.tolist()  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=words):
        restore(env, state)
    assert env.unwrapped.state.tolist() == moved != before  # type: ignore[attr-defined]
