"""Collectors layer: the public collectors, their shared API and their options."""

from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.batched import AsyncBatchedCollector
from rlcollect.collectors.collector import Collector
from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.ray_collector import RayCollector
from rlcollect.collectors.stats import CollectorStats
from rlcollect.rollout.profiling import ProfileConfig

__all__ = [
    "AsyncBatchedCollector",
    "BaseCollector",
    "Collector",
    "CollectorOptions",
    "CollectorStats",
    "MultiAsyncCollector",
    "MultiSyncCollector",
    "ProfileConfig",
    "RayCollector",
]
