"""TorchRL's arguments read as TorchRL reads them, before the core collectors see them.

Examples:
    >>> from rlcollect import collectors
    >>> arguments = {"split_trajs": None, "frames_per_batch": 8, "postproc": None}
    >>> none_means_default(collectors.Collector, arguments)
    >>> sorted(arguments)  # split_trajs's default is False: None means it; postproc's is None
    ['frames_per_batch', 'postproc']
    >>> idle_seconds("30")
    30.0
    >>> check_ray_replay_buffer([])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: replay_buffer=list: RayCollector requires a replay buffer with service_backend='ray' ...
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any

from rlcollect.collectors.options import CollectorOptions
from rlcollect.torchrl.translate import TORCHRL_ARGUMENTS
from rlcollect.workers.ray_transport import is_ray_writer

__all__ = ["check_ray_replay_buffer", "idle_seconds", "none_means_default"]


def none_means_default(cls: type, kwargs: dict[str, Any]) -> None:
    """Drop from ``kwargs`` each ``None`` whose argument has another default: TorchRL reads
    ``None`` as the default for every argument (its trainers pass ``None`` for each one they
    leave unset); an argument whose default is ``None`` keeps it."""
    defaults = _defaults(cls)
    for name in [name for name, value in kwargs.items() if value is None]:
        if defaults.get(name, None) is not None:
            del kwargs[name]


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    """The defaults of ``cls``'s constructor and of the options TorchRL's arguments fill."""
    defaults = {field.name: field.default for field in dataclasses.fields(CollectorOptions)
                if field.default is not dataclasses.MISSING}
    defaults.update(TORCHRL_ARGUMENTS)
    parameters = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
    defaults.update({p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty})
    return defaults


def idle_seconds(count: str) -> float:
    """TorchRL's ``MAX_IDLE_COUNT`` environment variable: how many of its 1 s polls a worker may
    stay silent; here the seconds a worker may take for a batch (the ``timeout`` argument)."""
    seconds = int(count) if count.strip().isdigit() else 0
    if seconds <= 0:
        raise ValueError(f"MAX_IDLE_COUNT={count!r} must be a positive int (seconds a worker may take "
                         "for a batch)")
    return float(seconds)


def check_ray_replay_buffer(replay_buffer: Any) -> None:
    """TorchRL's ``RayCollector`` writes only to a buffer its Ray actors can reach: TorchRL's Ray
    service buffer (``ReplayBuffer(..., service_backend='ray')``) or a Ray actor with ``extend``;
    an in-process buffer is refused with TorchRL's message (``rlcollect.RayCollector`` takes one
    and extends it in this process)."""
    if replay_buffer is None:
        return
    service = getattr(replay_buffer, "service_backend", None) == "ray" and callable(
        getattr(replay_buffer, "client", None))
    if not (service or is_ray_writer(replay_buffer)):
        raise TypeError(f"replay_buffer={type(replay_buffer).__name__}: RayCollector requires a replay "
                        "buffer with service_backend='ray' and a client() method. Construct it with "
                        "ReplayBuffer(..., service_backend='ray'). A regular in-process replay buffer "
                        "cannot be shared with distant Ray actors (as in TorchRL; rlcollect.RayCollector "
                        "takes one and extends it in this process).")
