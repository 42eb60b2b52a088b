"""TorchRL's ``Evaluator`` collecting with rlcollect's collectors: ``rlcollect.torchrl.Evaluator``.

TorchRL's ``Evaluator`` runs a policy for whole episodes, in a thread, a process or a Ray actor,
through a collector it builds from ``collector_cls``. The one here is TorchRL's own with
:class:`rlcollect.torchrl.Collector` as the default ``collector_cls``, and a class name given as a
string looked up in :mod:`rlcollect.torchrl` instead of ``torchrl.collectors``. Importing it
imports TorchRL (``pip install rlcollect[torchrl]``).

Examples:
    >>> import warnings
    >>> import torch
    >>> from tensordict.nn import TensorDictModule
    >>> from torchrl.envs import GymEnv
    >>> from rlcollect.torchrl import Evaluator
    >>> env = GymEnv("CartPole-v1")
    >>> _ = env.set_seed(0)
    >>> policy = TensorDictModule(torch.nn.Linear(4, 2), in_keys=["observation"], out_keys=["action"])
    >>> evaluator = Evaluator(env, policy, num_trajectories=2, max_steps=100)
    >>> with warnings.catch_warnings():  # TorchRL 0.14's notices of its coming defaults
    ...     warnings.simplefilter("ignore", FutureWarning)
    ...     metrics = evaluator.evaluate()
    >>> metrics["eval/num_episodes"]
    2
    >>> evaluator.shutdown()
"""

from __future__ import annotations

from typing import Any

from torchrl.collectors import Evaluator as TorchRLEvaluator

import rlcollect.torchrl.collectors as wing
from rlcollect.collectors import AsyncBatchedCollector, BaseCollector

__all__ = ["Evaluator"]


def _collector_class(collector_cls: type | str | None) -> type:
    if collector_cls is None:
        return wing.Collector
    if isinstance(collector_cls, str):
        named = {name: getattr(wing, name) for name in wing.__all__}
        named["AsyncBatchedCollector"] = AsyncBatchedCollector
        names = sorted(name for name, cls in named.items() if issubclass(cls, BaseCollector))
        if collector_cls not in names:
            raise ValueError(f"collector_cls={collector_cls!r} is not a collector of rlcollect.torchrl; "
                             f"allowed: a class, or one of {names}")
        found: type = named[collector_cls]
        return found
    return collector_cls


class Evaluator(TorchRLEvaluator):  # type: ignore[misc]
    """TorchRL's ``Evaluator`` whose collector is rlcollect's (see the module docstring).

    Where it isolates the evaluation in a worker process (``use_multi_collector=True``, or
    ``weight_sync_schemes``), TorchRL's evaluator builds TorchRL's own ``MultiSyncCollector``.
    """

    def __init__(self, env: Any, policy: Any = None, *, collector_cls: type | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(env, policy, collector_cls=_collector_class(collector_cls), **kwargs)
