"""Samplers: uniform frequencies, prioritized probabilities and weights, slices that respect episodes.

Frequencies are checked with a chi-square statistic against the 0.1 % critical value of its
distribution (fixed seeds: the statistic is the same on every run).
"""

from __future__ import annotations

import pickle

import pytest
import torch

from rlcollect.replay import ReplayBuffer
from tests.replay.frames_for_tests import make_batch

pytestmark = pytest.mark.timeout(60)

# chi-square critical values at p = 0.001 (scipy.stats.chi2.ppf(0.999, df))
CHI2_999 = {7: 24.322, 49: 85.351}


def chi_square(counts: torch.Tensor, expected: torch.Tensor) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


def test_uniform_frequencies() -> None:
    rb = ReplayBuffer(50, seed=0)
    rb.extend(make_batch(0, 1, 0, 60))  # full, and wrapped round
    draws = torch.cat([rb.sample(1000)["index"] for _ in range(50)])
    counts = torch.bincount(draws, minlength=50).double()
    assert chi_square(counts, torch.full((50,), len(draws) / 50)) < CHI2_999[49]


def test_uniform_draws_only_stored_frames() -> None:
    rb = ReplayBuffer(100, seed=0)
    rb.extend(make_batch(0, 1, 0, 7))
    assert set(rb.sample(2000)["index"].tolist()) == set(range(7))


def test_same_seed_same_samples() -> None:
    samples = []
    for _ in range(2):
        rb = ReplayBuffer(100, sampler="slice", slice_len=2, seed=3)
        rb.extend(make_batch(0, 2, 0, 20))
        samples.append(rb.sample(10)["index"])
    assert torch.equal(*samples)


def test_prioritized_frequencies_and_weights_follow_the_formula() -> None:
    alpha, beta, eps = 0.6, 0.4, 1e-6
    rb = ReplayBuffer(8, sampler="prioritized", alpha=alpha, beta=beta, eps=eps, seed=0)
    rb.extend(make_batch(0, 1, 0, 8))
    priority = torch.arange(1.0, 9.0, dtype=torch.float64)
    rb.update_priority(torch.arange(8), priority)
    p = (priority + eps) ** alpha
    prob = p / p.sum()
    samples = [rb.sample(1000) for _ in range(40)]
    index = torch.cat([s["index"] for s in samples])
    counts = torch.bincount(index, minlength=8).double()
    assert chi_square(counts, prob * len(index)) < CHI2_999[7]
    n = len(rb)
    weight = (n * prob) ** -beta
    weight /= weight.max()  # the largest weight over the stored frames
    got = torch.cat([s["_weight"] for s in samples]).double()
    assert torch.allclose(got, weight[index], rtol=1e-5)
    assert samples[0]["_weight"].dtype == torch.float32


def test_prioritized_new_frames_get_the_largest_priority_seen() -> None:
    alpha, beta, eps = 1.0, 1.0, 0.0
    rb = ReplayBuffer(4, sampler="prioritized", alpha=alpha, beta=beta, eps=eps, seed=0)
    rb.extend(make_batch(0, 1, 0, 4))
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 5.0, 1.0]))
    rb.extend(make_batch(0, 1, 4, 1))  # overwrites slot 0, gets priority 5
    sample = rb.sample(2000)
    weights = {int(i): float(w) for i, w in zip(sample["index"], sample["_weight"], strict=True)}
    assert weights[0] == pytest.approx(1 / 5)  # (p_i / min p) ** -beta, min p = 1 (slot 3)
    assert weights[2] == pytest.approx(1 / 5)
    assert weights[3] == pytest.approx(1.0)
    counts = torch.bincount(sample["index"], minlength=4).double()
    assert chi_square(counts, torch.tensor([5.0, 2.0, 5.0, 1.0]) / 13 * 2000) < 16.27  # df 3


def test_priorities_of_a_sample_skip_the_frames_written_over_its_slots_since() -> None:
    """A collector writes while the learner computes a sample's TD errors: the frames written over
    the sample's slots meanwhile keep the largest priority they were written with (a plain list of
    slots, not from a sample, is taken as it is)."""
    rb = ReplayBuffer(4, sampler="prioritized", alpha=1.0, beta=1.0, eps=0.0, seed=0)
    rb.extend(make_batch(0, 1, 0, 4))
    rb.update_priority(torch.arange(4), torch.tensor([2.0, 2.0, 2.0, 2.0]))
    sample = rb.sample(64)
    assert set(sample["index"].tolist()) == {0, 1, 2, 3}
    rb.extend(make_batch(1, 1, 0, 2))  # slots 0 and 1 now hold writer 1's frames, priority 2
    rb.update_priority(sample["index"].clone(), torch.full((64,), 0.5))  # any copy of the index
    weights = rb.sample(2000)
    by_slot = {int(i): float(w) for i, w in zip(weights["index"], weights["_weight"], strict=True)}
    assert by_slot == {0: pytest.approx(0.25), 1: pytest.approx(0.25), 2: 1.0, 3: 1.0}  # (p / min p) ** -1
    rb.update_priority(torch.tensor([0, 1]), torch.tensor([0.5, 0.5]))  # slots named directly: applied
    assert torch.equal(rb.sample(8)["_weight"], torch.ones(8))


def test_a_copy_for_another_process_keeps_the_samples_remembered_here() -> None:
    """Sending a shared buffer to a worker copies its sampler without priorities; the samples
    this process remembers for ``update_priority`` stay."""
    rb = ReplayBuffer(4, storage="shared", sampler="prioritized", alpha=1.0, beta=1.0, eps=0.0, seed=0)
    rb.extend(make_batch(0, 1, 0, 4))
    sample = rb.sample(64)
    pickle.dumps(rb)  # what starting a worker process does
    rb.extend(make_batch(1, 1, 0, 2))
    rb.update_priority(sample["index"], torch.full((64,), 0.5))
    weights = rb.sample(2000)
    by_slot = {int(i): float(w) for i, w in zip(weights["index"], weights["_weight"], strict=True)}
    assert by_slot == {0: pytest.approx(0.5), 1: pytest.approx(0.5), 2: 1.0, 3: 1.0}  # slots 0, 1: priority 1
    rb.close()


def test_prioritized_default_priority_before_any_update_is_uniform() -> None:
    rb = ReplayBuffer(10, sampler="prioritized", seed=0)
    rb.extend(make_batch(0, 1, 0, 4))
    sample = rb.sample(400)
    assert set(sample["index"].tolist()) == {0, 1, 2, 3}
    assert torch.equal(sample["_weight"], torch.ones(400))


def valid_starts(rb: ReplayBuffer, slice_len: int) -> set[int]:
    """Brute force: starts of ``slice_len`` frames of one trajectory in time order, no end but at the last."""
    data, cap = rb.data, rb.capacity
    starts = set()
    for s in range(len(rb)):
        slots = [(s + k) % cap for k in range(slice_len)]
        if any(k >= len(rb) for k in slots):
            continue
        code = data["action"][slots]
        traj = data["collector", "traj_ids"][slots]
        done = data["next", "done"][slots].view(-1)
        consecutive = bool((code.diff() == 1).all())  # frames in time order, no write boundary between
        if consecutive and bool((traj == traj[0]).all()) and not bool(done[:-1].any()):
            starts.add(s)
    return starts


def check_slices(sample: torch.Tensor, rb: ReplayBuffer, slice_len: int) -> set[int]:
    """Assert every slice is valid; return the start slots seen."""
    slices = sample.reshape(-1, slice_len)
    assert bool((slices["action"].diff(dim=1) == 1).all()), "a slice skips or repeats a step"
    traj = slices["collector", "traj_ids"]
    assert bool((traj == traj[:, :1]).all()), "a slice crosses a trajectory id change"
    return set(slices["index"][:, 0].tolist())


def test_slices_never_cross_episode_ends_traj_changes_or_the_write_boundary() -> None:
    slice_len = 3
    rb = ReplayBuffer(64, sampler="slice", slice_len=slice_len, seed=0)
    for b in range(5):  # 2 writers x 2 envs, episodes of 4 frames, wrapped round once
        for writer in (0, 1):
            rb.extend(make_batch(writer, 2, b * 4, 4, done_every=4 if writer == 0 else 5))
    assert rb.write_count == 80
    expected = valid_starts(rb, slice_len)
    seen: set[int] = set()
    for _ in range(100):
        sample = rb.sample(30)
        seen |= check_slices(sample, rb, slice_len)
        done = sample["next", "done"].view(-1, slice_len)
        stored_done = rb.data["next", "done"][sample["index"]].view(-1, slice_len)
        assert not bool(stored_done[:, :-1].any()), "an episode ends inside a slice"
        assert bool(done[:, -1].all()), "the sample marks each slice's end as done"
        assert bool(sample["next", "truncated"].view(-1, slice_len)[:, -1].all())
        assert not bool(sample["next", "truncated"].view(-1, slice_len)[:, :-1].any())
    assert seen == expected  # every valid slice is drawn, and only those


def test_slice_across_the_physical_end_of_storage_is_fine_but_not_across_the_cursor() -> None:
    rb = ReplayBuffer(10, sampler="slice", slice_len=3, seed=0)
    rb.extend(make_batch(0, 1, 0, 13))  # slots 0..9 hold steps 10 11 12 3 4 5 6 7 8 9; cursor 3
    starts: set[int] = set()
    for _ in range(50):
        starts |= check_slices(rb.sample(30), rb, 3)
    assert starts == {3, 4, 5, 6, 7, 8, 9, 0}  # steps 3..10 start a slice; 8 and 9 wrap to slot 0, 1


def test_slices_are_returned_flat_one_after_the_other() -> None:
    rb = ReplayBuffer(100, sampler="slice", slice_len=4, batch_size=12, seed=0)
    rb.extend(make_batch(0, 1, 0, 50))
    sample = rb.sample()
    assert sample.batch_size == torch.Size([12])
    assert sample.reshape(3, 4)["action"].diff(dim=1).eq(1).all()
