"""What a ``state_dict`` says it is, and the one check every ``load_state_dict`` makes of it.

A state is a mapping stamped with its ``"kind"`` (the class that made it) and ``"format"``;
:func:`checked_state` refuses, naming what is wrong, a state that is not a mapping, one of another
kind or format, one that lacks a key its kind always holds, or a tensor of another shape or dtype
than the one it replaces. States saved before the stamps existed (no ``"kind"``) are read by
their keys alone.

Examples:
    >>> state = stamped("Sampler", {"rng": 1})
    >>> checked_state("Sampler", state, ["rng"])["rng"]
    1
    >>> checked_state("PrioritizedSampler", state, ["rng"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: PrioritizedSampler.load_state_dict was given the state of a Sampler ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import torch

__all__ = ["STATE_FORMAT", "check_tensor", "checked_per_worker", "checked_state", "stamped", "state_kind"]

#: The version of every state's layout; a state of another one is refused.
STATE_FORMAT = 1


def state_kind(cls: type) -> str:
    """The collector class a state of ``cls`` belongs to: the first of rlcollect's own in its bases
    (a subclass, TorchRL's names included, loads the states of the class it extends)."""
    return next((k.__name__ for k in cls.__mro__ if k.__module__.startswith("rlcollect.collectors")),
                cls.__name__)


def stamped(kind: str, state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with its ``"kind"`` and ``"format"``."""
    return {"kind": kind, "format": STATE_FORMAT, **state}


def checked_state(kind: str, state: Any, required: Iterable[str]) -> Mapping[str, Any]:
    """``state`` once it is known to be a ``kind``'s state holding every ``required`` key.

    Raises:
        TypeError: ``state`` is not a mapping.
        ValueError: another kind or format, or a missing key (each named).
    """
    where = f"{kind}.load_state_dict"
    if not isinstance(state, Mapping):
        raise TypeError(f"{where} needs the mapping {kind}.state_dict() returns, got {type(state).__name__}")
    made_by = state.get("kind")
    if made_by is not None and made_by != kind:
        raise ValueError(f"{where} was given the state of a {made_by} (state[\"kind\"] == {made_by!r}); "
                         f"it loads only a {kind}'s state_dict()")
    version = state.get("format", STATE_FORMAT)
    if version != STATE_FORMAT:
        raise ValueError(f"{where}: state[\"format\"] is {version!r}; this rlcollect reads format "
                         f"{STATE_FORMAT}")
    missing = [key for key in required if key not in state]
    if missing:
        raise ValueError(f"{where}: the state lacks {', '.join(map(repr, missing))} (it holds "
                         f"{sorted(map(str, state))}); pass what {kind}.state_dict() returned")
    return state


def check_tensor(where: str, value: Any, like: torch.Tensor) -> torch.Tensor:
    """``value`` if it is a tensor of ``like``'s shape and dtype, for ``where`` (named in the error).

    Raises:
        TypeError: not a tensor, or another dtype.
        ValueError: another shape.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where} must be a tensor of shape {list(like.shape)} and dtype {like.dtype}, "
                        f"got {type(value).__name__}")
    if value.dtype != like.dtype:
        raise TypeError(f"{where} has dtype {value.dtype}; it replaces one of dtype {like.dtype}")
    if value.shape != like.shape:
        raise ValueError(f"{where} has shape {list(value.shape)}; it replaces one of shape "
                         f"{list(like.shape)}")
    return value


def checked_per_worker(kind: str, state: Any, keys: Iterable[str], workers: int) -> Mapping[str, Any]:
    """:func:`checked_state`, and each of ``keys`` a sequence of one entry per worker.

    Raises:
        TypeError, ValueError: as :func:`checked_state`, or entries for another number of workers.
    """
    keys = list(keys)
    state = checked_state(kind, state, keys)
    for key in keys:
        entries = state[key]
        if not isinstance(entries, (list, tuple)) or len(entries) != workers:
            count = len(entries) if isinstance(entries, (list, tuple)) else type(entries).__name__
            raise ValueError(f"{kind}.load_state_dict: state[{key!r}] holds {count} entries; this collector "
                             f"has {workers} workers")
    return cast(Mapping[str, Any], state)
