"""The ways people iterate a collector, in every collector: each gives the frames of one plain run.

Peeking at one batch (``next(iter(collector))``), leaving a loop with ``break``, two loops in a
row, ``collector.next()`` mixed with a loop, two live iterators used in turn (they share the
collector's one stream): a dropped iterator is not a shutdown (as in TorchRL,
whose ``__iter__`` shuts down on errors only), so the next loop goes on where the last one stopped.
Every idiom's batches, put end to end, must equal an uninterrupted run's (compared as in
``test_parity``: synchronous collectors batch for batch, asynchronous ones per worker).

Also here: weights given as ``TensorDict.from_module(policy)`` (parameters that require grad) reach
every collector's workers, and a collector dropped without ``shutdown()`` leaves no process behind.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from tests.collectors.test_multi import alive
from tests.collectors.test_parity import BATCHES, build, compare, reference_for

pytestmark = pytest.mark.timeout(120)

KINDS = ["single", "sync", "async", "batched"]


def peek_then_loop(collector: Any) -> list[TensorDictBase]:
    first = next(iter(collector))
    return [first, *collector]


def break_then_loop(collector: Any) -> list[TensorDictBase]:
    out = []
    for batch in collector:
        out.append(batch)
        if len(out) == 2:
            break
    return out + list(collector)


def two_loops(collector: Any) -> list[TensorDictBase]:
    out = list(collector)
    assert list(collector) == []  # the frames are all collected: the second loop is empty
    return out


def next_mixed_with_loops(collector: Any) -> list[TensorDictBase]:
    out = [collector.next()]
    for batch in collector:
        out.append(batch)
        break
    out.append(next(iter(collector)))
    while (batch := collector.next()) is not None:
        out.append(batch)
    return out


def two_live_iterators(collector: Any) -> list[TensorDictBase]:
    """Two iterators alive at once, used in turn: one stream, each batch to one of them."""
    first, second = iter(collector), iter(collector)
    out = []
    while True:
        try:
            out.append(next(first if len(out) % 2 == 0 else second))
        except StopIteration:
            return out


IDIOMS: dict[str, Callable[[Any], list[TensorDictBase]]] = {
    "peek_then_loop": peek_then_loop,
    "break_then_loop": break_then_loop,
    "two_loops": two_loops,
    "next_mixed_with_loops": next_mixed_with_loops,
    "two_live_iterators": two_live_iterators,
}


def check_idiom(kind: str, idiom: str) -> None:
    with build(kind, {}, BATCHES) as collector:
        got = IDIOMS[idiom](collector)
    compare("sync" if kind == "single" else kind, "frames", got, reference_for("defaults"))


@pytest.mark.parametrize("idiom", list(IDIOMS))
@pytest.mark.parametrize("kind", KINDS)
def test_every_iteration_idiom_gives_the_frames_of_one_run(kind: str, idiom: str) -> None:
    check_idiom(kind, idiom)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["ray-sync", "ray-async"])
def test_every_iteration_idiom_on_ray(ray_session: None, kind: str) -> None:
    for idiom in IDIOMS:
        check_idiom(kind, idiom)


@pytest.mark.parametrize("kind", [*KINDS, "sync-prefetch"])
def test_weights_from_a_module_tensordict_reach_the_workers(kind: str) -> None:
    """``TensorDict.from_module(policy)`` holds parameters that require grad: the update is applied
    (every later frame chosen by the new weights, stamped with version 1), collection goes on."""
    options = {"prefetch": True} if kind == "sync-prefetch" else {}
    collector = build(kind.replace("-prefetch", ""), options, 6)
    with collector:
        first = collector.next()
        assert first is not None
        source = torch.nn.Module()
        source.weight = torch.nn.Parameter(torch.tensor([0.0, 0.0, 0.0, 0.0]))  # always action 0
        weights = TensorDict.from_module(source)
        assert weights["weight"].requires_grad
        collector.update_policy_weights_(weights)
        later = [collector.next() for _ in range(4)]
    updated = [b for b in later if b is not None and (b["policy_version"] == 1).all()]
    assert updated, [b["policy_version"].unique().tolist() for b in later if b is not None]
    for batch in updated:
        assert (batch["action"] == 0).all()


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(map(alive, pids))


@pytest.mark.parametrize("kind", ["sync", "async", "batched"])
def test_a_collector_dropped_without_shutdown_leaves_no_process(kind: str) -> None:
    gc.disable()  # what keeps the collector alive must not be a cycle only the gc breaks
    try:
        dropped(kind)
    finally:
        gc.enable()


def dropped(kind: str) -> None:
    collector = build(kind, {}, BATCHES)
    for _ in collector:
        break
    pids = [pid for pid in collector.worker_pids if pid is not None]
    assert len(pids) == 2 and all(map(alive, pids))
    del collector  # freed at once, without a cyclic collection: the workers exit now
    assert gone_within(pids, 5.0)
    gc.collect()


def test_two_live_iterators_share_the_stream_with_prefetch() -> None:
    """With ``prefetch=True`` the workers fill the next batch while one is handed out: two
    iterators in turn still get each batch once (they delivered batches 1 and 2 alike before)."""
    with build("sync", {"prefetch": True}, BATCHES) as collector:
        got = two_live_iterators(collector)
    compare("sync", "frames", got, reference_for("defaults"))
