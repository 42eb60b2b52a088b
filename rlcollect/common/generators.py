"""The process's global random generators (torch's, numpy's global one and Python's ``random``)
and those a policy holds.

A policy may draw from any of them (``torch.distributions``, ``np.random.rand() < epsilon``,
``random.random()``), so a seed seeds all three, and a state holds all three. Worker processes
start as copies of one process: without this, a policy drawing from numpy's global generator
would draw the same numbers in every worker.

The states are tensors, ints and tuples only, so a checkpoint holding them loads with
``torch.load(path, weights_only=True)``.

A policy copied to several workers carries copies of the generators it holds (a seeded action
space, a ``np.random.default_rng(s)``): :func:`derive_held_generators` gives each worker but the
first a stream of its own, and :func:`kept_generators` keeps a dry step of the policy from
drawing from them.

Examples:
    >>> import random
    >>> import numpy as np
    >>> seed_generators(3)
    >>> state = generator_states()
    >>> first = (np.random.rand(), random.random())
    >>> restore_generators(state)
    >>> (np.random.rand(), random.random()) == first
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import pickle
import random
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

__all__ = [
    "derive_held_generators", "generator_states", "held_generators", "kept_generators", "restore_generators",
    "seed_generators",
]


def seed_generators(seed: int) -> None:
    """Seed torch's, numpy's global and Python's generators with ``seed`` (numpy's modulo 2**32)."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def generator_states() -> dict[str, Any]:
    """The three generators' states: ``{"torch": ByteTensor, "numpy": {...}, "python": tuple}``."""
    numpy_state = np.random.get_state(legacy=False)
    assert isinstance(numpy_state, dict)  # legacy=False: always a dict (typeshed allows a tuple)
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "python": random.getstate(),
    }


def restore_generators(states: Mapping[str, Any] | torch.Tensor) -> None:
    """Restore :func:`generator_states`'s ``states``; a bare tensor (or a mapping without numpy's
    or Python's entry: a state saved before they were kept) restores torch's alone."""
    if isinstance(states, torch.Tensor):
        states = {"torch": states}
    torch.set_rng_state(states["torch"])
    numpy_state = states.get("numpy")
    if numpy_state is not None:
        np.random.set_state({
            "bit_generator": "MT19937",
            "state": {"key": numpy_state["key"].numpy().astype(np.uint32), "pos": int(numpy_state["pos"])},
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        })
    if states.get("python") is not None:
        random.setstate(states["python"])


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How to read, restore and seed one kind of generator (``seed`` takes a 128-bit int)."""

    get: Callable[[Any], Any]
    set: Callable[[Any, Any], object]
    seed: Callable[[Any, int], object]


def _set_bit_generator(generator: np.random.Generator, state: Any) -> None:
    generator.bit_generator.state = state


_KINDS: dict[type, _Kind] = {
    torch.Generator: _Kind(
        torch.Generator.get_state, torch.Generator.set_state, lambda g, seed: g.manual_seed(seed % 2**63),
    ),
    np.random.Generator: _Kind(
        lambda g: g.bit_generator.state, _set_bit_generator,
        lambda g, seed: _set_bit_generator(g, type(g.bit_generator)(seed).state),
    ),
    np.random.RandomState: _Kind(
        np.random.RandomState.get_state, np.random.RandomState.set_state,
        lambda g, seed: g.seed([(seed >> (32 * i)) & 0xFFFFFFFF for i in range(4)]),
    ),
    random.Random: _Kind(random.Random.getstate, random.Random.setstate, random.Random.seed),
}


#: The generator kinds a policy may hold as an attribute (a gymnasium space holds a numpy one).
HELD_KINDS = tuple(_KINDS)
_LEAVES = (str, bytes, int, float, complex, type(None), type, types.ModuleType, torch.Tensor, np.ndarray)


def held_generators(obj: Any, *, depth: int = 8) -> list[Any]:
    """The random generators ``obj`` holds, each once: numpy's ``Generator`` and ``RandomState``,
    ``random.Random`` and ``torch.Generator`` objects reached through attributes, containers,
    a function's closure and the globals it names, a bound method's object or a ``partial``, at
    most ``depth`` steps away (modules, classes, tensors and arrays are not entered; a container's
    first 1,000 items, 50,000 objects in all).

    Examples:
        >>> class EpsilonGreedy:
        ...     def __init__(self) -> None:
        ...         self.rng = np.random.default_rng(0)
        ...         self.noise = {"torch": torch.Generator()}
        >>> [type(found).__name__ for found in held_generators(EpsilonGreedy())]
        ['Generator', 'Generator']
    """
    found: list[Any] = []
    seen: set[int] = set()
    stack = [(obj, 0)]
    while stack and len(seen) < 50_000:  # a bound on the walk through a large object graph
        item, level = stack.pop()
        if id(item) in seen or isinstance(item, _LEAVES):
            continue
        seen.add(id(item))
        if isinstance(item, HELD_KINDS):
            found.append(item)
        elif level < depth:
            stack.extend((child, level + 1) for child in reversed(_children(item)))
    return found


def _children(item: Any) -> list[Any]:
    """What :func:`held_generators` looks into from ``item`` (a container's first 1,000 items)."""
    if isinstance(item, dict):
        return list(itertools.islice(item.values(), 1000))
    if isinstance(item, (list, tuple, set, frozenset)):
        return list(itertools.islice(item, 1000))
    if isinstance(item, types.MethodType):
        return [item.__self__, item.__func__]
    if isinstance(item, types.FunctionType):
        cells = [cell.cell_contents for cell in item.__closure__ or () if _filled(cell)]
        named = [item.__globals__[name] for name in _global_names(item.__code__) if name in item.__globals__]
        return cells + named + list(item.__defaults__ or ())
    if isinstance(item, functools.partial):
        return [item.func, *item.args, *item.keywords.values()]
    try:  # an object: its attributes (a proxy's own lookup may raise anything)
        children = list(vars(item).values()) if hasattr(item, "__dict__") else []
        slots = getattr(type(item), "__slots__", ())
        names = [slots] if isinstance(slots, str) else list(slots)
        children += [getattr(item, name) for name in names if isinstance(name, str) and hasattr(item, name)]
    except Exception:
        return []
    return children


def _global_names(code: types.CodeType) -> set[str]:
    """The names ``code`` and the code nested in it (comprehensions, inner functions) look up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _filled(cell: Any) -> bool:
    """Whether a closure ``cell`` holds a value (not a variable assigned later)."""
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True


def derive_held_generators(obj: Any, stream: int) -> int:
    """Give each generator ``obj`` holds a stream of its own, ``stream`` (a worker's first env)
    apart: re-seeded from a digest of its own state and ``stream``, so that copies of one policy
    in several workers draw different numbers, the same ones run after run when the original was
    seeded. ``stream`` 0 leaves them as they are (the first worker steps as one process would).
    Returns how many were re-seeded.

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> copies = [np.random.default_rng(0) for _ in range(2)]
        >>> [derive_held_generators(copy, stream) for stream, copy in enumerate(copies)]
        [0, 1]
        >>> copies[0].random() == rng.random(), copies[1].random() == rng.random()
        (True, False)
    """
    if stream == 0:
        return 0
    found = held_generators(obj)
    for generator in found:
        _reseed(generator, stream)
    return len(found)


def _reseed(generator: Any, stream: int) -> None:
    """Re-seed ``generator`` from a digest of its state and ``stream``."""
    kind = _kind_of(generator)
    state = kind.get(generator)
    state = state.numpy().tobytes() if isinstance(state, torch.Tensor) else pickle.dumps(state)
    digest = hashlib.blake2b(state + stream.to_bytes(8, "little", signed=True), digest_size=16).digest()
    kind.seed(generator, int.from_bytes(digest, "little"))


@contextlib.contextmanager
def kept_generators(obj: Any) -> Iterator[None]:
    """Leave the generators ``obj`` holds as they were before the block: a collector's dry step of
    the policy at construction draws nothing from them, so a worker's copy starts where the
    policy is. (The global generators are left to the dry step, as TorchRL's collectors leave them;
    a seed reseeds them after it.)

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> with kept_generators(rng):
        ...     _ = rng.random()
        >>> rng.random() == np.random.default_rng(0).random()
        True
    """
    held = [(generator, _kind_of(generator).get(generator)) for generator in held_generators(obj)]
    try:
        yield
    finally:
        for generator, state in held:
            _kind_of(generator).set(generator, state)


def _kind_of(generator: Any) -> _Kind:
    return next(kind for cls, kind in _KINDS.items() if isinstance(generator, cls))
