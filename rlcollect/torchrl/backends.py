"""TorchRL 0.14's ``Collector(backend=..., num_collectors=..., sync=...)``: which collector a call
builds, with TorchRL's checks and messages.

Examples:
    >>> select((), {"create_env_fn": "CartPole-v1"}, None, None, 2, True).kind
    'process'
    >>> select((), {"create_env_fn": "CartPole-v1"}, "direct", None, None, None).kind
    'direct'
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any

from rlcollect.collectors.checks import check_flag

__all__ = ["BACKENDS", "Selection", "context_backend", "select"]


#: ``Collector(backend=...)``: this process, worker processes, Ray actors (rlcollect's collectors),
#: or TorchRL's own RPC / torch.distributed / submitit collectors (see :func:`select`).
BACKENDS = ("direct", "process", "ray", "rpc", "distributed", "submitit")


_ALIASES = {"multiprocessing": "process", "threading": "thread"}


#: What ``backend_options`` may not hold: the selectors.
_RESERVED = ("backend", "backend_options", "num_collectors", "num_workers", "sync")


#: The backends handed to TorchRL's collectors: (module, class).
_TORCHRL_BACKENDS = {"rpc": ("torchrl.collectors.distributed.rpc", "RPCCollector"),
                     "distributed": ("torchrl.collectors.distributed.generic", "DistributedCollector"),
                     "submitit": ("torchrl.collectors.distributed.generic", "DistributedCollector")}


def context_backend() -> str | None:
    """The backend an enclosing ``torchrl.service_backend(...)`` block sets, if TorchRL is loaded."""
    backends = sys.modules.get("torchrl._comm.backends")
    getter = getattr(backends, "_get_service_backend", None)
    return None if getter is None else getter()


@dataclass
class Selection:
    """What a ``Collector(...)`` call builds: ``kind`` ``"direct"`` (a :class:`Collector` of
    ``args`` and ``kwargs``), ``"process"`` (``MultiSyncCollector`` or ``MultiAsyncCollector`` as
    ``sync`` says, of ``env_fns``), ``"ray"`` (a ``RayCollector``) or ``"torchrl"`` (TorchRL's own
    ``target`` class)."""

    kind: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    env_fns: list[Any] = field(default_factory=list)
    listed: bool = False
    sync: bool = False
    target: Any = None


def _check_selectors(args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None,
                     backend_options: dict[str, Any] | None, num_collectors: int | None
                     ) -> tuple[str, dict[str, Any]]:
    """The backend chosen (TorchRL's name) and its options, checked as TorchRL checks them."""
    if len(args) > 2:
        raise TypeError("Collector accepts at most create_env_fn and policy positionally.")
    if num_collectors is not None:
        if isinstance(num_collectors, bool) or not isinstance(num_collectors, int):
            raise TypeError(f"num_collectors must be a positive integer, got {num_collectors!r}.")
        if num_collectors < 1:
            raise ValueError(f"num_collectors must be a positive integer, got {num_collectors!r}.")
    context = context_backend() if backend is None else None
    chosen = backend or context or ("process" if num_collectors is not None else "direct")
    chosen = _ALIASES.get(chosen, chosen)
    if chosen not in BACKENDS:
        where = " (selected by an enclosing torchrl.service_backend context.)" if context else ""
        raise ValueError(f"Collector does not support backend={chosen!r}. Expected one of "
                         f"{list(BACKENDS)}{where}")
    options = dict(backend_options or {})
    reserved = sorted(set(options) & set(_RESERVED))
    if reserved:
        raise ValueError(f"backend_options contains reserved selector keys: {reserved}.")
    duplicates = sorted(set(options) & (set(kwargs) | set(("create_env_fn", "policy")[:len(args)])))
    if duplicates:
        raise ValueError(f"Backend options duplicate top-level collector arguments: {duplicates}.")
    return chosen, options


def select(args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None,
           backend_options: dict[str, Any] | None, num_collectors: int | None, sync: bool | None
           ) -> Selection:
    """TorchRL 0.14's ``Collector(...)`` selection (``kwargs`` is consumed)."""
    chosen, options = _check_selectors(args, kwargs, backend, backend_options, num_collectors)
    env_fn = args[0] if args else kwargs.pop("create_env_fn", None)
    rest = args[1:]
    listed = isinstance(env_fn, (list, tuple))
    if chosen == "direct":
        if num_collectors not in (None, 1):
            raise ValueError("backend='direct' supports at most one collector.")
        if sync is not None:
            raise ValueError("sync is only valid for non-direct collectors.")
        if options:
            raise ValueError("backend_options are only valid for non-direct collectors.")
        if listed:
            if len(env_fn) != 1:
                raise ValueError("backend='direct' requires exactly one environment constructor, "
                                 f"got {len(env_fn)}.")
            env_fn = env_fn[0]
        return Selection("direct", (env_fn, *rest), kwargs)
    if sync is not None:
        check_flag("sync", sync)
    if listed:
        if not env_fn:
            raise ValueError("create_env_fn must contain at least one environment.")
        if num_collectors is not None and num_collectors != len(env_fn):
            raise ValueError("num_collectors does not match the number of environment constructors: "
                             f"{num_collectors} != {len(env_fn)}.")
        env_fns = list(env_fn)
    else:
        env_fns = [env_fn] * (num_collectors or 1)
    kwargs.update(options)
    selection = Selection(chosen, rest, kwargs, env_fns, listed, bool(sync))
    if chosen in ("ray", "process"):
        return selection
    if chosen == "submitit" and kwargs.setdefault("launcher", "submitit") != "submitit":
        raise ValueError(f"backend='submitit' requires launcher='submitit', got {kwargs['launcher']!r}.")
    module, name = _TORCHRL_BACKENDS[chosen]
    try:
        selection.target = getattr(importlib.import_module(module), name)
    except ImportError as error:
        raise ImportError(f"backend={chosen!r} runs TorchRL's own {name}: install TorchRL "
                          f"(pip install 'rlcollect[torchrl]'); {error}") from error
    selection.kind = "torchrl"
    return selection
