"""Weights layer: weight-update forms, the weight-sync schemes and their channels.

Examples:
    >>> from rlcollect.weights import SharedMemWeightSyncScheme
    >>> SharedMemWeightSyncScheme().strategy
    'tensordict'
"""

from typing import Any

from rlcollect.weights.forms import apply_weights, as_weights, weight_update_forms
from rlcollect.weights.schemes import (
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    RayWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightSyncScheme,
)
from rlcollect.weights.store import WeightStore, WorkerWeights
from rlcollect.weights.updater import WeightUpdaterBase
from rlcollect.weights.watch import StaleWeightsWarning

__all__ = [
    "DistributedWeightSyncScheme",
    "MultiProcessWeightSyncScheme",
    "NoWeightSyncScheme",
    "RayWeightSyncScheme",
    "SharedMemWeightSyncScheme",
    "StaleWeightsWarning",
    "WeightStore",
    "WeightSyncScheme",
    "WeightUpdaterBase",
    "WorkerWeights",
    "apply_weights",
    "as_weights",
    "weight_update_forms",
]


def __getattr__(name: str) -> Any:
    if name == "DistributedWeightSyncScheme":  # imports torch.distributed only when asked for
        from rlcollect.weights.distributed import DistributedWeightSyncScheme

        return DistributedWeightSyncScheme
    raise AttributeError(f"module 'rlcollect.weights' has no attribute {name!r}")
