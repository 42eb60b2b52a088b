"""``BaseCollector`` is the reference's base: a user's subclass that implements only the reference's
abstract methods (``iterator``, ``shutdown``, ``set_seed``, ``state_dict``, ``load_state_dict``)
builds, iterates, counts its batches, takes weight updates into its ``policy``, and is a torch
``IterableDataset`` that a ``DataLoader`` reads; so is every rlcollect collector."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import DataLoader, IterableDataset

from rlcollect import AsyncBatchedCollector, BaseCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from tests.envs_for_tests import WeightedPolicy

pytestmark = pytest.mark.timeout(60)


class PlainLoopCollector(BaseCollector):
    """A hand-written collector: one CartPole, a linear policy, ``T`` steps per batch."""

    def __init__(self, frames_per_batch: int, total_frames: int, seed: int = 0) -> None:
        self.env = gym.make("CartPole-v1")
        self.policy = torch.nn.Linear(4, 1, bias=False)
        torch.nn.init.constant_(self.policy.weight, 0.1)  # the same actions in every instance
        self.frames_per_batch, self.total_frames = frames_per_batch, total_frames
        self.requested_frames_per_batch = frames_per_batch
        self.seed = seed
        self.closed = False

    def iterator(self) -> Iterator[TensorDictBase]:
        obs, _ = self.env.reset(seed=self.seed)
        for _ in range(self.total_frames // self.frames_per_batch):
            rows = []
            for _ in range(self.frames_per_batch):
                with torch.no_grad():
                    action = int(self.policy(torch.as_tensor(obs)).item() > 0)
                next_obs, reward, terminated, truncated, _ = self.env.step(action)
                rows.append({"observation": torch.as_tensor(obs), "action": torch.tensor(action),
                             "reward": torch.tensor(float(reward))})
                obs = next_obs if not (terminated or truncated) else self.env.reset()[0]
            yield TensorDict({k: torch.stack([r[k] for r in rows]) for k in rows[0]}, batch_size=[len(rows)])

    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        self.closed = True
        self.env.close()

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        self.seed = seed
        return seed + 1

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state_dict: Any) -> None:
        self.seed = state_dict["seed"]


def as_is(batch: TensorDictBase) -> TensorDictBase:
    """The DataLoader's collate function for TensorDict batches (its default converts mappings)."""
    return batch


def test_a_subclass_with_the_references_abstract_methods_builds_and_iterates() -> None:
    collector = PlainLoopCollector(frames_per_batch=16, total_frames=64)
    assert isinstance(collector, IterableDataset)
    with collector:
        batches = list(collector)
        assert len(batches) == len(collector) == 4
        assert all(batch.batch_size == torch.Size([16]) for batch in batches)
        stats = collector.stats()
        assert (stats.frames, stats.batches) == (64, 4) and stats.fps > 0
        weights = {"weight": torch.ones(1, 4)}
        collector.update_policy_weights_(weights=weights)
        assert torch.equal(collector.policy.weight, torch.ones(1, 4))
        with pytest.raises(NotImplementedError, match="cannot take weights for 'critic'"):
            collector.update_policy_weights_(weights_dict={"critic": weights})
    assert collector.closed


def test_a_dataloader_reads_the_same_batches_as_a_loop() -> None:
    expected = list(PlainLoopCollector(frames_per_batch=8, total_frames=32, seed=3))
    collector = PlainLoopCollector(frames_per_batch=8, total_frames=32, seed=3)
    loaded = list(DataLoader(collector, batch_size=None, collate_fn=as_is))
    assert len(loaded) == len(expected) == 4
    for got, want in zip(loaded, expected, strict=True):
        for key in want.keys():  # noqa: SIM118 (a TensorDict's keys)
            assert torch.equal(got[key], want[key]), key


@pytest.mark.parametrize("cls", [Collector, MultiSyncCollector, MultiAsyncCollector, AsyncBatchedCollector])
def test_every_collector_is_an_iterable_dataset(cls: type) -> None:
    assert issubclass(cls, IterableDataset) and issubclass(cls, BaseCollector)


def test_a_dataloader_reads_a_collector() -> None:
    with Collector("CartPole-v1", frames_per_batch=32, total_frames=96, seed=0) as collector:
        batches = list(DataLoader(collector, batch_size=None, collate_fn=as_is))
    with Collector("CartPole-v1", frames_per_batch=32, total_frames=96, seed=0) as collector:
        expected = list(collector)
    assert len(batches) == 3
    for got, want in zip(batches, expected, strict=True):
        assert torch.equal(got["observation"], want["observation"])
        assert torch.equal(got["next", "reward"], want["next", "reward"])


def test_the_references_flags_and_policy_device_helper() -> None:
    """trust_policy, compiled_policy, cudagraphed_policy, verbose; _get_policy_and_device copies
    the policy onto a device (the original weights stay where they were) or warns where it cannot."""
    collector = PlainLoopCollector(frames_per_batch=8, total_frames=8)
    assert (collector.trust_policy, collector.compiled_policy, collector.cudagraphed_policy,
            collector.verbose) == (False, False, False, False)
    moved, original = collector._get_policy_and_device(collector.policy, torch.device("meta"))
    assert next(moved.parameters()).device.type == "meta" and original is not None
    assert torch.equal(original()["weight"], torch.full((1, 4), 0.1))
    same, none = collector._get_policy_and_device(collector.policy)  # no policy_device: as it is
    assert same is collector.policy and none is None
    with pytest.warns(UserWarning, match="policy_device=cpu was given but the policy has no parameter"):
        kept, _ = collector._get_policy_and_device(lambda obs: obs, "cpu")
    collector.trust_policy = True
    collector._get_policy_and_device(lambda obs: obs, "cpu")  # trusted: no warning (errors are on)
    compiled = Collector("CartPole-v1", WeightedPolicy(), frames_per_batch=4,
                         compile_policy={"backend": "eager"})
    assert compiled.compiled_policy and not Collector("CartPole-v1", frames_per_batch=4).compiled_policy


def test_weight_update_keywords_and_receiving_without_receivers() -> None:
    """Other keywords go to a legacy weight_updater; without one they are an error naming them;
    _receive_weights_scheme() without receiver schemes raises, as in the reference."""
    calls: list[dict[str, Any]] = []

    def updater(**kwargs: Any) -> None:
        calls.append(kwargs)

    policy = WeightedPolicy()
    with Collector("CartPole-v1", policy, frames_per_batch=4, weight_updater=updater) as collector:
        collector.update_policy_weights_(policy, foo=1)
    assert calls == [{"policy_or_weights": policy, "worker_ids": None, "foo": 1}]
    with Collector("CartPole-v1", policy, frames_per_batch=4) as collector:
        with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['foo'\]"):
            collector.update_policy_weights_(foo=1)
        with pytest.raises(RuntimeError, match="No receiver schemes registered"):
            collector._receive_weights_scheme()


@pytest.mark.parametrize("num_workers", [1, 2])
def test_dataloader_workers_are_refused_rather_than_repeating_batches(
    num_workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each DataLoader worker would iterate its own copy: with 2, every batch came twice (the same
    seeded frames), and with any, weight updates never reached the copies. (Inside a DataLoader
    worker process, ``get_worker_info()`` returns its info: that is what the test stands in for,
    as forking DataLoader workers from a test process with threads can crash it.)"""
    with Collector("CartPole-v1", frames_per_batch=8, total_frames=32, seed=0) as collector:
        monkeypatch.setattr(torch.utils.data, "get_worker_info",
                            lambda: SimpleNamespace(id=0, num_workers=num_workers))
        refused = rf"DataLoader worker 0 of num_workers={num_workers}.*num_workers=0"
        with pytest.raises(RuntimeError, match=refused):
            list(DataLoader(collector, batch_size=None, collate_fn=as_is))
        monkeypatch.undo()
        assert len(list(DataLoader(collector, batch_size=None, collate_fn=as_is))) == 4  # in this process


class Bare(BaseCollector):
    """A subclass that sets neither ``frames_per_batch`` nor ``total_frames``."""

    def iterator(self) -> Iterator[TensorDictBase]:
        yield TensorDict({"x": torch.zeros(2)}, batch_size=[2])

    def shutdown(self, timeout: float | None = None, close_env: bool = True,
                 raise_on_error: bool = True) -> None:
        return None

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        return seed

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: Any) -> None:
        return None


def test_repr_and_len_of_a_subclass_without_the_counts() -> None:
    assert repr(Bare()) == "Bare(total_frames=endless)"
    with pytest.raises(RuntimeError, match=r"total_frames=-1 never ends and has no length"):
        len(Bare())
    sized = PlainLoopCollector(frames_per_batch=16, total_frames=64)
    assert repr(sized) == "PlainLoopCollector(frames_per_batch=16, total_frames=64)" and len(sized) == 4
