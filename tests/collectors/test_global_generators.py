"""A policy may draw from torch's, numpy's global or Python's generator (``torch.randint``,
``np.random.rand() < epsilon``, ``random.random()``). With ``seed=s``, each process seeds all three
with ``s`` plus its first env: worker processes, which start as copies of one process, draw numbers
of their own, the same run after run, and a resumed collector continues them.
"""

from __future__ import annotations

import io
import random
from typing import Any

import numpy as np
import pytest
import torch

from rlcollect import Collector, MultiSyncCollector
from tests.envs_for_tests import make_cartpole

pytestmark = pytest.mark.timeout(120)

SOURCES = ["torch", "numpy", "python"]


class Draws(torch.nn.Module):
    """Actions drawn from one global generator, whatever the observation."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        n = obs.shape[0]
        if self.source == "numpy":
            return torch.from_numpy(np.random.randint(0, 2, n))
        if self.source == "python":
            return torch.tensor([random.randrange(2) for _ in range(n)])
        return torch.randint(0, 2, (n,))


def actions(collector: Any, batches: int) -> torch.Tensor:
    with collector:
        return torch.stack([collector.next()["action"].clone() for _ in range(batches)])


@pytest.mark.parametrize("source", SOURCES)
def test_workers_draw_their_own_numbers_the_same_run_after_run(source: str) -> None:
    def run() -> torch.Tensor:
        return actions(MultiSyncCollector(make_cartpole, Draws(source), num_workers=2, frames_per_batch=64,
                                          seed=5), 1)[0]

    first, second = run(), run()
    assert first.shape == (2, 32)
    assert not torch.equal(first[0], first[1])  # each worker its own numbers (not one stream twice)
    assert torch.equal(first, second)


@pytest.mark.parametrize("source", SOURCES)
def test_one_process_draws_the_same_run_after_run_and_continues_after_a_resume(source: str) -> None:
    def build() -> Collector:
        return Collector(make_cartpole, Draws(source), num_envs=2, frames_per_batch=40, seed=5)

    uninterrupted = actions(build(), 4)
    assert torch.equal(actions(build(), 4), uninterrupted)
    with build() as collector:
        collector.next()
        collector.next()
        saved = io.BytesIO()
        torch.save(collector.state_dict(), saved)
    actions(build(), 3)  # the generators move on in between
    saved.seek(0)
    with build() as collector:
        collector.load_state_dict(torch.load(saved))
        resumed = torch.stack([collector.next()["action"].clone() for _ in range(2)])
    assert torch.equal(resumed, uninterrupted[2:])
