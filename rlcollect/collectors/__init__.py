"""Collectors layer: the public collectors and their shared API."""

from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.collector import Collector
from rlcollect.collectors.multi_async import MultiAsyncCollector
from rlcollect.collectors.multi_sync import MultiSyncCollector
from rlcollect.collectors.stats import CollectorStats
from rlcollect.rollout.profiling import ProfileConfig

__all__ = [
    "BaseCollector",
    "Collector",
    "CollectorStats",
    "MultiAsyncCollector",
    "MultiSyncCollector",
    "ProfileConfig",
]
