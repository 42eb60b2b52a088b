"""Distributed layer: collectors running in Ray actors, on one machine or a cluster.

Ray is imported only when a :class:`RayCollector` is built; without it that raises an
``ImportError`` naming ``pip install rlcollect[ray]``.
"""

from rlcollect.distributed.ray_collector import RayCollector

__all__ = ["RayCollector"]
