"""``ReplayConfig``: a replay buffer's settings, validated once at construction.

Every check names the argument, the value it got and what is allowed.

Examples:
    >>> ReplayConfig(1000, sampler="slice", slice_len=8, batch_size=64).batch_size
    64
    >>> ReplayConfig(0)
    Traceback (most recent call last):
    ...
    ValueError: capacity must be a positive int, got capacity=0
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["SAMPLERS", "STORAGES", "ReplayConfig", "is_int"]

STORAGES = ("memory", "shared", "memmap")
SAMPLERS = ("uniform", "prioritized", "slice")


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer (Python or numpy), not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True)
class ReplayConfig:
    """A replay buffer's settings, validated once (see :class:`ReplayBuffer` for their meaning)."""

    capacity: int
    storage: str = "memory"
    path: Path | None = None
    sampler: str = "uniform"
    batch_size: int | None = None
    alpha: float = 0.6
    beta: float = 0.4
    eps: float = 1e-6
    slice_len: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if not is_int(self.capacity) or self.capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got capacity={self.capacity!r}")
        if self.storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, got storage={self.storage!r}")
        if self.storage == "memmap" and self.path is None:
            raise ValueError("storage='memmap' needs a folder: pass path=...")
        if self.storage != "memmap" and self.path is not None:
            raise ValueError(f"path is only used with storage='memmap', got storage={self.storage!r}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got sampler={self.sampler!r}")
        if self.batch_size is not None and (not is_int(self.batch_size) or self.batch_size <= 0):
            raise ValueError(f"batch_size must be a positive int or None, got batch_size={self.batch_size!r}")
        for name in ("alpha", "beta", "eps"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {name}={value!r}")
        if self.sampler == "slice":
            if self.slice_len is None:
                raise ValueError("sampler='slice' needs slice_len (the number of frames per slice)")
            if not is_int(self.slice_len) or not 0 < self.slice_len <= self.capacity:
                raise ValueError(
                    f"slice_len must be an int in [1, capacity={self.capacity}], "
                    f"got slice_len={self.slice_len!r}"
                )
            if self.batch_size is not None and self.batch_size % self.slice_len:
                raise ValueError(
                    f"batch_size must be a multiple of slice_len={self.slice_len}, "
                    f"got batch_size={self.batch_size}"
                )
        elif self.slice_len is not None:
            raise ValueError(f"slice_len is only used with sampler='slice', got sampler={self.sampler!r}")
        if self.seed is not None and not is_int(self.seed):
            raise ValueError(f"seed must be an int or None, got seed={self.seed!r}")
