"""Which scheme each model of a collector gets, and the channel that carries their weights to the
workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rlcollect.weights.forms import check_model_ids
from rlcollect.weights.frozen import FrozenWeights
from rlcollect.weights.schemes import (
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    RayWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightChannel,
    WeightSyncScheme,
)

__all__ = ["channel_for", "default_scheme", "init_senders"]


def init_senders(
    schemes: Mapping[str, WeightSyncScheme] | None, models: Mapping[str, torch.nn.Module], transport: str,
    collector: Any,
) -> dict[str, WeightSyncScheme]:
    """Every model's scheme (``schemes`` completed with the transport's default), initialised on
    the sender side for ``collector``.

    Raises:
        KeyError: a scheme for a model id the collector does not have.
        ValueError: a scheme that cannot feed this ``transport``'s workers, or two scheme classes
            (the models of one collector move through one channel, so ``weights_dict`` is atomic).
    """
    given = dict(schemes or {})
    check_model_ids(given, models)
    for model_id, scheme in given.items():
        if transport not in scheme.transports:
            raise ValueError(
                f"weight_sync_schemes[{model_id!r}]: {type(scheme).__name__} cannot feed the workers of "
                f"{type(collector).__name__} ({_TRANSPORT_WORDS[transport]}); use "
                f"{' or '.join(c.__name__ for c in _SCHEMES if transport in c.transports)}")
    moving = sorted({type(s).__name__ for s in given.values() if not isinstance(s, NoWeightSyncScheme)})
    if len(moving) > 1:
        raise ValueError(f"weight_sync_schemes mixes {moving}: the models of one collector move together "
                         "(atomic weights_dict updates), so they use one scheme class, or NoWeightSyncScheme")
    default = next((s for s in given.values() if not isinstance(s, NoWeightSyncScheme)), None)
    every = {m: given.get(m) or (type(default)(default.strategy) if default else default_scheme(transport))
             for m in sorted(models, key=lambda k: (k != "policy", k))}
    for model_id, scheme in every.items():
        scheme.init_on_sender(model_id=model_id, context=collector, model=models[model_id])
    return every


def channel_for(schemes: Mapping[str, WeightSyncScheme], models: Mapping[str, torch.nn.Module],
                num_workers: int) -> WeightChannel:
    """The one channel carrying the models whose scheme moves weights (see :func:`init_senders`)."""
    moving = {m: s for m, s in schemes.items() if not isinstance(s, NoWeightSyncScheme)}
    if not moving:
        return FrozenWeights(num_workers)
    return next(iter(moving.values())).channel({m: models[m] for m in moving}, num_workers)


def default_scheme(transport: str) -> WeightSyncScheme:
    """The scheme a model gets when ``weight_sync_schemes`` does not name it."""
    return RayWeightSyncScheme() if transport == "ray" else SharedMemWeightSyncScheme()


_SCHEMES = (SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme, RayWeightSyncScheme, NoWeightSyncScheme)


_TRANSPORT_WORDS = {"process": "worker processes", "ray": "Ray actors", "local": "a single process"}
