"""rlcollect: reinforcement-learning experience collection at the speed of a hand-written loop.

Example:
    >>> from rlcollect import Collector
    >>> with Collector("CartPole-v1", frames_per_batch=64, total_frames=128, seed=0) as collector:
    ...     for batch in collector:
    ...         print(batch.batch_size, batch["next", "done"].dtype)
    torch.Size([1, 64]) torch.bool
    torch.Size([1, 64]) torch.bool
"""

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
from rlcollect.data import split_trajectories
from rlcollect.replay import ReplayBuffer

__version__ = "0.1.0"

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
    "split_trajectories",
]
