"""rlcollect: reinforcement-learning experience collection at the speed of a hand-written loop.

Examples:
    >>> from rlcollect import Collector
    >>> with Collector("CartPole-v1", frames_per_batch=64, total_frames=128, seed=0) as collector:
    ...     for batch in collector:
    ...         print(batch.batch_size, batch["next", "done"].dtype)
    torch.Size([1, 64]) torch.bool
    torch.Size([1, 64]) torch.bool
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcollect.collectors import (
        AsyncBatchedCollector,
        BaseCollector,
        Collector,
        CollectorStats,
        MultiAsyncCollector,
        MultiSyncCollector,
        ProfileConfig,
        RayCollector,
    )
    from rlcollect.collectors.loggers import TensorBoardLogger, WandbLogger
    from rlcollect.collectors.threads import ThreadsWarning
    from rlcollect.data import split_trajectories
    from rlcollect.data.run_folder import load_run
    from rlcollect.replay import ReplayBuffer
    from rlcollect.tuning import tune

__version__ = "0.1.0"

# Public names and the package each lives in, imported on first use: ``import rlcollect`` (and the
# command line's ``--help``) does not pay for torch and tensordict until a collector is asked for.
_WHERE = {
    **dict.fromkeys(["AsyncBatchedCollector", "BaseCollector", "Collector", "CollectorStats",
                     "MultiAsyncCollector", "MultiSyncCollector", "ProfileConfig", "RayCollector"],
                    "rlcollect.collectors"),
    "split_trajectories": "rlcollect.data",
    **dict.fromkeys(["TensorBoardLogger", "WandbLogger"], "rlcollect.collectors.loggers"),
    "load_run": "rlcollect.data.run_folder",
    "ThreadsWarning": "rlcollect.collectors.threads",
    "ReplayBuffer": "rlcollect.replay",
    "tune": "rlcollect.tuning",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # once: later lookups are plain attribute reads
        return value
    raise AttributeError(f"module 'rlcollect' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

__all__ = [
    "AsyncBatchedCollector",
    "BaseCollector",
    "Collector",
    "CollectorStats",
    "MultiAsyncCollector",
    "MultiSyncCollector",
    "ProfileConfig",
    "RayCollector",
    "ReplayBuffer",
    "TensorBoardLogger",
    "ThreadsWarning",
    "WandbLogger",
    "load_run",
    "split_trajectories",
    "tune",
]
