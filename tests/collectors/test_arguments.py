"""One argument list: each shared argument is declared and documented once (a group in
``rlcollect.collectors.arguments``), every constructor refuses what it does not take, and
``from_options`` builds the collector the constructor builds."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from rlcollect.collectors.arguments import (
    CollectorArguments,
    EnvArguments,
    SharedArguments,
    WorkerArguments,
    argument_names,
)
from rlcollect.collectors.options import CollectorOptions

GROUPS = (SharedArguments, EnvArguments, CollectorArguments, WorkerArguments)
CLASSES = (Collector, MultiSyncCollector, MultiAsyncCollector, AsyncBatchedCollector, RayCollector)


#: The group each group extends.
PARENTS = {EnvArguments: SharedArguments, CollectorArguments: EnvArguments}


def _own(group: type) -> set[str]:
    """The arguments ``group`` declares itself (not those of the group it extends)."""
    parent = PARENTS.get(group)
    return set(argument_names(group)) - (set(argument_names(parent)) if parent else set())


def test_each_shared_argument_is_declared_and_documented_once() -> None:
    seen: dict[str, str] = {}
    for group in GROUPS:
        doc = inspect.getdoc(group) or ""
        for name in _own(group):
            assert name not in seen, f"{name} is declared by {seen[name]} and {group.__name__}"
            seen[name] = group.__name__
            assert f"\n    {name}: " in doc, f"{group.__name__} does not document {name}"
    fields = {field.name for field in dataclasses.fields(CollectorOptions)}
    assert set(seen) <= fields  # each one is an option, checked there


@pytest.mark.parametrize("cls", CLASSES)
def test_no_constructor_restates_a_shared_argument(cls: type) -> None:
    named = set(inspect.signature(cls).parameters) - {"arguments"}
    restated = named & cls.accepted_arguments
    assert not restated, f"{cls.__name__} names {sorted(restated)}, which its group declares"
    assert cls.accepted_arguments >= argument_names(SharedArguments)


@pytest.mark.parametrize("cls", CLASSES)
def test_an_argument_the_class_does_not_take_is_refused_before_anything_starts(cls: type) -> None:
    with pytest.raises(TypeError, match=rf"^{cls.__name__}\(\) got an unexpected keyword argument 'colour'$"):
        required = {"num_collectors": 1} if cls is RayCollector else {}
        cls("CartPole-v1", frames_per_batch=8, colour="blue", **required)
    with pytest.raises(TypeError, match="unexpected keyword argument 'preemptive_threshold'"):
        Collector("CartPole-v1", frames_per_batch=8, preemptive_threshold=0.5)  # MultiSync's own


def test_errors_name_the_argument_the_user_wrote() -> None:
    with pytest.raises(ValueError, match=r"^num_envs must be a positive int, got 0"):
        Collector("CartPole-v1", frames_per_batch=8, num_envs=0)
    with pytest.raises(ValueError, match=r"^envs_per_worker must be a positive int, got 0"):
        AsyncBatchedCollector("CartPole-v1", lambda obs: torch.zeros(len(obs), dtype=torch.long),
                              frames_per_batch=8, envs_per_worker=0, num_envs=2)


@pytest.mark.timeout(60)
def test_from_options_builds_what_the_constructor_builds() -> None:
    options = CollectorOptions(create_env_fn="CartPole-v1", frames_per_batch=8, total_frames=16,
                               num_envs_per_worker=2, seed=3)
    with Collector.from_options(options) as collector:
        built = [batch.clone() for batch in collector]
    with Collector("CartPole-v1", frames_per_batch=8, total_frames=16, num_envs=2, seed=3) as collector:
        constructed = list(collector)
    assert len(built) == len(constructed) == 2
    for a, b in zip(built, constructed, strict=True):
        assert a.shape == b.shape == torch.Size([2, 4])
        assert (a == b).all()


@pytest.mark.timeout(60)
def test_multi_process_from_options_checks_the_synchrony() -> None:
    options = CollectorOptions(create_env_fn="CartPole-v1", frames_per_batch=8, total_frames=8, num_workers=2,
                               seed=0)
    with pytest.raises(ValueError, match=r"MultiAsyncCollector.from_options needs options.sync=False"):
        MultiAsyncCollector.from_options(options)
    with MultiSyncCollector.from_options(options) as collector:
        batches = list(collector)
    with MultiSyncCollector("CartPole-v1", num_workers=2, frames_per_batch=8, total_frames=8,
                            seed=0) as other:
        expected = list(other)
    assert [b.shape for b in batches] == [torch.Size([2, 4])]
    assert (batches[0] == expected[0]).all()
