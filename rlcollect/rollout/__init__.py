"""Rollout layer: the hot loop filling preallocated batch buffers."""

from rlcollect.rollout.config import RolloutConfig
from rlcollect.rollout.episodes import EpisodeTracker
from rlcollect.rollout.loop import collect_batch

__all__ = ["EpisodeTracker", "RolloutConfig", "collect_batch"]
