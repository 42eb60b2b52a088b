"""ReplayBuffer writes: flattening, masks, circular order, counters, layout checks, empty()."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict

from rlcollect.replay import ReplayBuffer
from tests.replay.frames_for_tests import make_batch

pytestmark = pytest.mark.timeout(60)


def codes(rb: ReplayBuffer) -> list[int]:
    """The code of the frame in each stored slot, in slot order."""
    return rb.data["action"][: len(rb)].tolist()


def test_batch_is_stored_env_major_in_time_order() -> None:
    rb = ReplayBuffer(100)
    slots = rb.extend(make_batch(writer=0, num_envs=2, t0=0, steps=3))
    assert slots.tolist() == [0, 1, 2, 3, 4, 5]
    assert codes(rb) == [0, 1, 2, 10_000, 10_001, 10_002]
    assert (len(rb), rb.write_count, rb.cursor) == (6, 6, 6)


def test_circular_overwrite_keeps_the_newest_frames_in_write_order() -> None:
    rb = ReplayBuffer(5)
    rb.extend(make_batch(0, 1, t0=0, steps=3))  # steps 0 1 2 -> slots 0 1 2
    slots = rb.extend(make_batch(0, 1, t0=3, steps=4))  # steps 3 4 5 6 -> slots 3 4 0 1
    assert slots.tolist() == [3, 4, 0, 1]
    assert codes(rb) == [5, 6, 2, 3, 4]
    assert (len(rb), rb.write_count, rb.cursor) == (5, 7, 2)
    oldest_first = [codes(rb)[(rb.cursor + i) % 5] for i in range(5)]
    assert oldest_first == [2, 3, 4, 5, 6]


def test_a_batch_larger_than_capacity_keeps_its_last_frames() -> None:
    rb = ReplayBuffer(4)
    rb.extend(make_batch(0, 1, t0=0, steps=1))
    slots = rb.extend(make_batch(0, 1, t0=1, steps=10))  # steps 1..10: 7 8 9 10 are kept
    assert slots.tolist() == [3, 0, 1, 2]
    assert codes(rb) == [8, 9, 10, 7]
    assert (rb.write_count, rb.cursor) == (11, 3)


def test_masked_out_frames_are_not_stored_nor_the_mask() -> None:
    rb = ReplayBuffer(10)
    batch = make_batch(0, 2, t0=0, steps=3)
    batch["collector", "mask"] = torch.tensor([[True, True, False], [True, False, False]])
    slots = rb.extend(batch)
    assert slots.tolist() == [0, 1, 2]
    assert codes(rb) == [0, 1, 10_000]
    assert ("collector", "mask") not in rb.data.keys(True, True)
    assert ("collector", "traj_ids") in rb.data.keys(True, True)
    # a later batch without a mask has the same layout
    rb.extend(make_batch(0, 1, t0=3, steps=1))
    assert rb.write_count == 4


def test_all_masked_batch_writes_nothing() -> None:
    rb = ReplayBuffer(10)
    batch = make_batch(0, 1, t0=0, steps=2)
    batch["collector", "mask"] = torch.zeros(1, 2, dtype=torch.bool)
    assert rb.extend(batch).tolist() == []
    assert (len(rb), rb.write_count) == (0, 0)


def test_a_collector_batch_goes_in_unchanged() -> None:
    from rlcollect import Collector

    with Collector("CartPole-v1", frames_per_batch=8, num_envs=2, seed=0) as collector:
        batch = collector.next()
    rb = ReplayBuffer(16, batch_size=4, seed=0)
    rb.extend(batch)
    assert torch.equal(rb.data["next", "observation"][:8], batch["next", "observation"].reshape(8, 4))
    assert torch.equal(rb.data["collector", "traj_ids"][:8], batch["collector", "traj_ids"].reshape(8))
    assert rb.sample().batch_size == torch.Size([4])


def test_init_lays_out_the_storage_before_any_frame() -> None:
    rb = ReplayBuffer(8, storage="shared")
    rb.init(make_batch(0, 2, 0, 3))
    assert rb.data.batch_size == torch.Size([8])
    assert rb.data["observation"].is_shared()
    assert (len(rb), rb.write_count) == (0, 0)
    rb.init(make_batch(1, 1, 0, 1))  # same layout: nothing happens
    with pytest.raises(ValueError, match=r"frames' 'observation' has frame shape \(5,\)"):
        rb.init(make_batch(0, 1, 0, 1, obs_size=5))


@pytest.mark.parametrize("storage", ["memory", "shared"])
def test_frames_with_another_layout_are_refused_with_the_difference(storage: str) -> None:
    rb = ReplayBuffer(8, storage=storage)
    rb.extend(make_batch(0, 1, 0, 2))
    with pytest.raises(ValueError, match=r"missing \[\"\('next', 'reward'\)\"\]"):
        rb.extend(make_batch(0, 1, 0, 2).exclude(("next", "reward")))
    renamed = make_batch(0, 1, 0, 2)  # as many keys, one of them another: was an AttributeError on None
    renamed["next", "rew"] = renamed.pop(("next", "reward"))
    missing = r"missing \[\"\('next', 'reward'\)\"\], unexpected \[\"\('next', 'rew'\)\"\]"
    with pytest.raises(ValueError, match=missing):
        rb.extend(renamed)
    with pytest.raises(ValueError, match=r"'observation' has frame shape \(5,\) .* buffer stores \(4,\)"):
        rb.extend(make_batch(0, 1, 0, 2, obs_size=5))
    with pytest.raises(ValueError, match="unexpected \\['extra'\\]"):
        rb.extend(make_batch(0, 1, 0, 2).set("extra", torch.zeros(1, 2)))
    bad = make_batch(0, 1, 0, 2)
    bad["action"] = bad["action"].to(torch.int32)
    with pytest.raises(ValueError, match="'action' has frame shape \\(\\) and dtype torch.int32"):
        rb.extend(bad)
    with pytest.raises(TypeError, match="stores TensorDicts, got dict"):
        rb.extend({"observation": torch.zeros(2, 4)})
    with pytest.raises(ValueError, match="at least one batch dimension"):
        rb.extend(TensorDict({"observation": torch.zeros(4)}, batch_size=[]))
    assert (len(rb), rb.write_count, rb.cursor) == (2, 2, 2)  # nothing was reserved by the refused batches
    assert rb.data["action"][:2].tolist() == [0, 1]


def test_empty_forgets_frames_and_keeps_the_layout() -> None:
    rb = ReplayBuffer(8, sampler="prioritized", seed=0)
    rb.extend(make_batch(0, 1, 0, 5))
    rb.update_priority(torch.tensor([1]), torch.tensor([10.0]))
    rb.empty()
    assert (len(rb), rb.write_count, rb.cursor) == (0, 0, 0)
    with pytest.raises(RuntimeError, match="empty ReplayBuffer"):
        rb.sample(2)
    rb.extend(make_batch(0, 1, 0, 2))
    assert rb.sample(4)["_weight"].tolist() == [1.0] * 4  # the old priority is gone


def test_sample_errors() -> None:
    rb = ReplayBuffer(8)
    with pytest.raises(RuntimeError, match="cannot sample from an empty ReplayBuffer"):
        rb.sample(2)
    rb.extend(make_batch(0, 1, 0, 2))
    with pytest.raises(ValueError, match="sample\\(\\) needs a batch_size"):
        rb.sample()
    with pytest.raises(ValueError, match="batch_size must be a positive int, got batch_size=0"):
        rb.sample(0)
    with pytest.raises(ValueError, match="update_priority needs sampler='prioritized'"):
        rb.update_priority(torch.tensor([0]), 1.0)


def test_a_memory_buffer_pickles_as_a_copy() -> None:
    rb = ReplayBuffer(8, batch_size=2, seed=0)
    rb.extend(make_batch(0, 1, 0, 3))
    copy = pickle.loads(pickle.dumps(rb))
    assert torch.equal(copy.sample()["index"], rb.sample()["index"])  # same generator state
    copy.extend(make_batch(0, 1, 3, 1))
    assert (rb.write_count, copy.write_count) == (3, 4)


def test_repr_names_the_settings_and_counters() -> None:
    rb = ReplayBuffer(8, sampler="slice", slice_len=2)
    rb.extend(make_batch(0, 1, 0, 3))
    assert repr(rb) == (
        "ReplayBuffer(capacity=8, storage='memory', sampler='slice', slice_len=2, len=3, write_count=3)"
    )
