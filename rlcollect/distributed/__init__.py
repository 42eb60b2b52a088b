"""``from rlcollect.distributed import RayCollector`` keeps working: it lives in the collectors layer."""

from rlcollect.collectors.ray_collector import RayCollector

__all__ = ["RayCollector"]
