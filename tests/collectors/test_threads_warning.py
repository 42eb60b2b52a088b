"""A collector that runs a CPU policy in your process says once when torch's threads compete
with it (``rlcollect.ThreadsWarning``, naming ``torch.set_num_threads``), and only then."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import rlcollect
import rlcollect.collectors.threads as threads_module
from rlcollect import Collector, MultiSyncCollector

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def default_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torch at two intra-op threads (its default on this 2-core machine), no warning given yet."""
    monkeypatch.setattr(threads_module, "_warned", False)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def _greedy() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 2), _Argmax())


class _Argmax(nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores.argmax(-1)


def _built(make: Any) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with make():
            pass
    return [warning for warning in caught if issubclass(warning.category, rlcollect.ThreadsWarning)]


def test_warns_once_per_process_naming_set_num_threads_at_your_line(default_threads: None) -> None:
    first = _built(lambda: Collector("CartPole-v1", _greedy(), frames_per_batch=8))
    assert len(first) == 1
    message = str(first[0].message)
    assert "torch runs 2 intra-op threads" in message and "torch.set_num_threads(1)" in message, message
    assert first[0].filename == __file__  # your line, not rlcollect's
    assert _built(lambda: Collector("CartPole-v1", _greedy(), frames_per_batch=8)) == []  # once


@pytest.mark.parametrize("policy", [None, "one thread"])
def test_silent_at_one_thread_or_without_a_policy(default_threads: None, policy: Any) -> None:
    if policy == "one thread":
        torch.set_num_threads(1)
        policy = _greedy()
    assert _built(lambda: Collector("CartPole-v1", policy, frames_per_batch=8)) == []
    assert not threads_module._warned  # nothing said: the next collector that needs it still warns


def test_silent_where_the_policy_runs_elsewhere(default_threads: None) -> None:
    """Worker processes set one thread each; a policy on another device does not use these threads."""
    assert _built(lambda: MultiSyncCollector("CartPole-v1", _greedy(), num_workers=2,
                                             frames_per_batch=16)) == []
    assert not threads_module._on_cpu(_greedy(), policy_device="cuda")
    assert not threads_module._on_cpu(nn.Linear(4, 2, device="meta"), policy_device=None)
    assert threads_module._on_cpu(_greedy(), policy_device="cpu")
    assert threads_module._on_cpu(lambda observation: observation[:, 0] > 0, policy_device=None)
    assert not threads_module._warned


def test_filtered_by_its_category(default_threads: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=rlcollect.ThreadsWarning)
        with Collector("CartPole-v1", _greedy(), frames_per_batch=8) as collector:
            assert collector.next().batch_size == torch.Size([1, 8])
