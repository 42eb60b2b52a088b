"""TorchRL 0.14's collector names on rlcollect's engine: change one import line to switch.

Code written against TorchRL imports its collectors from ``torchrl.collectors``; importing the same
names from here runs rlcollect's collectors instead:

.. code-block:: python

    # from torchrl.collectors import Collector, MultiSyncCollector
    from rlcollect.torchrl import Collector, MultiSyncCollector

What this module gives today: the names, and the legacy aliases TorchRL still accepts
(``SyncDataCollector``, ``MultiSyncDataCollector``, ``MultiaSyncDataCollector``,
``DataCollectorBase``), bound to rlcollect's collectors with their own arguments and batch layout.
TorchRL's own collector tests, vendored in ``tests/torchrl_suite/`` with this one import changed,
measure how far that goes; TorchRL's envs, TensorDict policies and layout are being brought onto
the engine behind these names.

Examples:
    >>> from rlcollect.torchrl import Collector, SyncDataCollector
    >>> SyncDataCollector is Collector
    True
    >>> with Collector("CartPole-v1", frames_per_batch=16, total_frames=16, seed=0) as collector:
    ...     print([batch.batch_size for batch in collector])
    [torch.Size([1, 16])]
"""

from __future__ import annotations

from rlcollect.collectors import (
    BaseCollector,
    Collector,
    MultiAsyncCollector,
    MultiSyncCollector,
    ProfileConfig,
    RayCollector,
)
from rlcollect.weights import WeightUpdaterBase

#: TorchRL's names from before 0.11, which it still accepts.
SyncDataCollector = Collector
MultiSyncDataCollector = MultiSyncCollector
MultiaSyncDataCollector = MultiAsyncCollector
DataCollectorBase = BaseCollector

__all__ = [
    "BaseCollector",
    "Collector",
    "DataCollectorBase",
    "MultiAsyncCollector",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "ProfileConfig",
    "RayCollector",
    "SyncDataCollector",
    "WeightUpdaterBase",
]
