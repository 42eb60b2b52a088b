"""Collectors layer: the public collectors and their shared API."""

from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.collector import Collector
from rlcollect.collectors.profile import ProfileConfig
from rlcollect.collectors.stats import CollectorStats

__all__ = ["BaseCollector", "Collector", "CollectorStats", "ProfileConfig"]
