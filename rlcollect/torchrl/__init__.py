"""TorchRL 0.14's collector names on rlcollect's engine: change one import line to switch.

Code written against TorchRL imports its collectors from ``torchrl.collectors``; importing the same
names from here runs rlcollect's collectors instead:

```python
# from torchrl.collectors import Collector, MultiSyncCollector
from rlcollect.torchrl import Collector, MultiSyncCollector
```

What this module gives today: the names (``Collector`` with ``num_collectors`` / ``backend``,
``MultiCollector(sync=...)``, ``AsyncCollector``), and the legacy aliases TorchRL still accepts
(``SyncDataCollector``, ``MultiSyncDataCollector``, ``MultiaSyncDataCollector``,
``aSyncDataCollector``, ``DataCollectorBase``), bound to rlcollect's collectors with their own
arguments and TorchRL's (:data:`TORCHRL_ARGUMENTS`), and TorchRL's
batch layout by default (:class:`TorchRLLayout`, see :mod:`rlcollect.torchrl.layout`: root
``done`` / ``terminated`` / ``truncated``, ``[T]`` batches for one unbatched env,
``policy_version`` only with ``track_policy_version=True``). TorchRL's own collector tests, vendored
in ``tests/torchrl_suite/`` with this one import changed, measure how far that goes.

Examples:
    >>> from torchrl.envs import GymEnv
    >>> from rlcollect.torchrl import Collector, SyncDataCollector
    >>> SyncDataCollector is Collector
    True
    >>> with Collector(GymEnv("CartPole-v1"), frames_per_batch=16, total_frames=16, seed=0) as collector:
    ...     print([batch.batch_size for batch in collector], collector.get_policy_version())
    [torch.Size([16])] None
"""

from __future__ import annotations

from typing import Any

from rlcollect.collectors import AsyncBatchedCollector, BaseCollector, ProfileConfig
from rlcollect.torchrl.collectors import (
    AsyncCollector,
    Collector,
    DataCollectorBase,
    MultiAsyncCollector,
    MultiCollector,
    MultiSyncCollector,
    RayCollector,
)
from rlcollect.torchrl.layout import TorchRLLayout
from rlcollect.torchrl.stats import TorchRLStats
from rlcollect.torchrl.translate import TORCHRL_ARGUMENTS
from rlcollect.weights import WeightUpdaterBase

#: TorchRL's names from before 0.11, which it still accepts.
SyncDataCollector = Collector
MultiSyncDataCollector = MultiSyncCollector
MultiaSyncDataCollector = MultiAsyncCollector
aSyncDataCollector = AsyncCollector

__all__ = [
    "AsyncBatchedCollector",
    "AsyncCollector",
    "BaseCollector",
    "Collector",
    "DataCollectorBase",
    "Evaluator",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "ProfileConfig",
    "RayCollector",
    "SyncDataCollector",
    "TORCHRL_ARGUMENTS",
    "TorchRLLayout",
    "TorchRLStats",
    "WeightUpdaterBase",
    "aSyncDataCollector",
]


def __getattr__(name: str) -> Any:
    if name == "Evaluator":  # TorchRL's own class (on rlcollect's collectors): imports TorchRL
        from rlcollect.torchrl.evaluator import Evaluator

        return Evaluator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
