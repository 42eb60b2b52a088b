"""The process's global random generators: torch's, numpy's global one and Python's ``random``.

A policy may draw from any of them (``torch.distributions``, ``np.random.rand() < epsilon``,
``random.random()``), so a seed seeds all three, and a state holds all three. Worker processes
start as copies of one process: without this, a policy drawing from numpy's global generator
would draw the same numbers in every worker.

The states are tensors, ints and tuples only, so a checkpoint holding them loads with
``torch.load(path, weights_only=True)``.

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

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["generator_states", "restore_generators", "seed_generators"]


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
