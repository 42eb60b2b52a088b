"""A policy may hold a random generator of its own: a seeded Gymnasium action space it samples for
epsilon-greedy (``space.seed(s)`` then ``space.sample()``, as CleanRL writes it), a
``np.random.default_rng(s)``, a ``torch.Generator``, a ``random.Random``. Each worker process
steps a copy of the policy; the copies would draw the same numbers in every worker. The first
worker keeps the generator as it is (it steps as one process would); every other worker's copy
is re-seeded from the generator's state and the worker's first env: its own numbers, the same
ones run after run.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect import Collector, MultiSyncCollector
from rlcollect.common.generators import derive_held_generators, held_generators
from tests.envs_for_tests import make_cartpole

pytestmark = pytest.mark.timeout(120)


class SpaceSampler:
    """Epsilon-greedy with epsilon 1: every action from its own seeded copy of the action space."""

    def __init__(self, seed: int) -> None:
        self.space = gym.spaces.Discrete(2)
        self.space.seed(seed)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tensor([int(self.space.sample()) for _ in range(obs.shape[0])])


class TorchNoise(torch.nn.Module):
    """Actions from a ``torch.Generator`` held in a submodule's attribute."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.inner = torch.nn.Identity()
        self.inner.generator = torch.Generator().manual_seed(seed)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.randint(0, 2, (obs.shape[0],), generator=self.inner.generator)


RNG = random.Random(3)


def module_level_random(obs: torch.Tensor) -> torch.Tensor:
    """Actions from a generator the function names as a global."""
    return torch.tensor([RNG.randrange(2) for _ in range(obs.shape[0])])


POLICIES = {"space": lambda: SpaceSampler(7), "torch": lambda: TorchNoise(7)}


def actions(collector: Any) -> torch.Tensor:
    with collector:
        return collector.next()["action"].clone()


def test_held_generators_are_found_through_attributes_containers_closures_and_partials() -> None:
    rng, legacy, python, gen = (np.random.default_rng(0), np.random.RandomState(0), random.Random(0),
                                torch.Generator())
    holder = TorchNoise(0)

    def closure(obs: torch.Tensor) -> float:
        return float(legacy.rand())

    found = held_generators([{"a": rng}, closure, functools.partial(print, python), holder, gen, rng])
    ids = {id(g) for g in found}
    assert ids == {id(rng), id(legacy), id(python), id(gen), id(holder.inner.generator)}
    assert len(found) == 5  # each once
    assert [id(g) for g in held_generators(module_level_random)] == [id(RNG)]
    space = SpaceSampler(0)
    assert [id(g) for g in held_generators(space)] == [id(space.space.np_random)]
    assert held_generators(torch.nn.Linear(2, 2)) == []


@pytest.mark.parametrize("kind", ["numpy", "legacy", "python", "torch"])
def test_derived_streams_keep_stream_zero_differ_otherwise_and_repeat(kind: str) -> None:
    def make() -> Any:
        return {"numpy": lambda: np.random.default_rng(0), "legacy": lambda: np.random.RandomState(0),
                "python": lambda: random.Random(0), "torch": lambda: torch.Generator().manual_seed(0)}[kind]()

    def draws(generator: Any) -> list[float]:
        if isinstance(generator, torch.Generator):
            return torch.rand(4, generator=generator).tolist()
        return [generator.random() if hasattr(generator, "random") else generator.rand() for _ in range(4)]

    streams = {}
    for stream in (0, 1, 4):
        generator = make()
        assert derive_held_generators(generator, stream) == (0 if stream == 0 else 1)
        streams[stream] = draws(generator)
    assert streams[0] == draws(make())  # stream 0: untouched
    assert len({tuple(v) for v in streams.values()}) == 3
    again = make()
    derive_held_generators(again, 4)
    assert draws(again) == streams[4]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_workers_draw_their_own_numbers_and_the_first_worker_those_of_one_process(policy: str) -> None:
    def run() -> torch.Tensor:
        return actions(MultiSyncCollector(make_cartpole, POLICIES[policy](), num_workers=2,
                                          frames_per_batch=64, seed=5))

    first, second = run(), run()
    assert first.shape == (2, 32) and first.dtype == torch.int64
    assert not torch.equal(first[0], first[1])  # the copies drew numbers of their own
    assert torch.equal(first, second)  # the same run after run
    one = actions(Collector(make_cartpole, POLICIES[policy](), frames_per_batch=32, seed=5))
    assert torch.equal(first[0], one[0])  # worker 0 steps as one process would


def test_a_global_generator_a_policy_function_names_is_derived_in_each_worker() -> None:
    batch = actions(MultiSyncCollector(make_cartpole, module_level_random, num_workers=2,
                                       frames_per_batch=64, seed=1))
    assert batch.shape == (2, 32)
    reference = random.Random(3)  # the module's RNG as each worker imports it
    expected = []
    for stream in (0, 1):
        copy = random.Random()
        copy.setstate(reference.getstate())
        derive_held_generators(copy, stream)
        expected.append(torch.tensor([copy.randrange(2) for _ in range(32)]))
    assert torch.equal(batch[0], expected[0]) and torch.equal(batch[1], expected[1])
    assert not torch.equal(expected[0], expected[1])
