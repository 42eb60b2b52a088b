"""Weights through an object store (Ray's, replaced here by a dict): versions, subsets, stale payloads."""

from __future__ import annotations

import pytest
import torch

from rlcollect.weights.forms import as_weights
from rlcollect.weights.object_store import ObjectStoreWeights


def linear(value: float) -> torch.nn.Linear:
    module = torch.nn.Linear(2, 1)
    with torch.no_grad():
        module.weight.fill_(value)
        module.bias.fill_(value)
    return module


def test_versions_subsets_and_stale_payloads() -> None:
    puts: list[object] = []
    sender = ObjectStoreWeights({"policy": linear(0.0)}, num_workers=2, put=lambda x: puts.append(x) or x,
                                get=lambda refs: refs)
    sender.push({"policy": as_weights(linear(1.0))}, worker_ids=[0, 1])
    sender.push({"policy": as_weights(linear(2.0))}, worker_ids=[1])
    assert sender.versions == [1, 2] and len(puts) == 2  # one put per update, whatever the workers
    stale = sender.payload(1)
    sender.push({"policy": as_weights(linear(3.0))}, worker_ids=[1])
    restarted, module = sender.receiver(1), linear(0.0)  # a worker restarted after the last update
    assert restarted.pull({"policy": module}, seen=-1, payload=stale) == 3  # the old request resent
    assert module.weight.flatten().tolist() == [3.0, 3.0]
    other = linear(0.0)
    assert sender.receiver(0).pull({"policy": other}, seen=0, payload=sender.payload(0)) == 1
    assert other.bias.item() == 1.0
    assert sender.receiver(0).pull({"policy": other}, seen=1, payload=sender.payload(0)) == 1  # no move


def test_a_rejected_update_changes_nothing() -> None:
    sender = ObjectStoreWeights({"policy": linear(0.0)}, 1, put=lambda x: x, get=lambda refs: refs)
    with pytest.raises(ValueError, match=r"'weight' has shape \(3,\), the module's has \(1, 2\)"):
        sender.push({"policy": as_weights({"weight": torch.zeros(3)})}, worker_ids=[0])
    with pytest.raises(KeyError, match="unknown model id"):
        sender.push({"critic": as_weights(linear(1.0))}, worker_ids=[0])
    assert sender.versions == [0] and sender.payload(0) == ([{}], 0)
