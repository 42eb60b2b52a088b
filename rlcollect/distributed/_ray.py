"""Ray, imported on demand: the one place that says how to install it, and how errors unwrap."""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["connect", "describe", "import_ray", "original_error"]

_INSTALL_HINT = "RayCollector needs Ray: pip install rlcollect[ray]  (or: pip install 'ray[default]>=2.9')"


def import_ray() -> Any:
    """The ``ray`` module.

    Raises:
        ImportError: Ray is not installed; the message names the extra to install.
    """
    try:
        return importlib.import_module("ray")
    except ImportError as error:
        raise ImportError(f"{_INSTALL_HINT} ({error})") from error


def connect(ray_init_config: dict[str, Any] | None, num_cpus: int) -> bool:
    """Make sure this process is connected to Ray; return whether this call initialised it.

    An already initialised Ray is used as it is. With ``RAY_ADDRESS`` set or an ``"address"`` in
    ``ray_init_config``, ``ray.init`` connects to that cluster; otherwise it starts a local one
    with at least ``num_cpus`` CPUs (and no dashboard, unless ``ray_init_config`` asks for one).
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    config = dict(ray_init_config or {})
    if "address" not in config and not os.environ.get("RAY_ADDRESS"):
        config.setdefault("num_cpus", max(os.cpu_count() or 1, num_cpus))
        config.setdefault("include_dashboard", False)
    ray.init(**config)
    return True


def original_error(error: BaseException) -> BaseException:
    """The exception to show the user for a failure reported by Ray.

    A ``RayTaskError`` (raised inside an actor) becomes an instance of the original exception's
    type, carrying the actor's traceback (``as_instanceof_cause``); anything else is returned as
    it is (an actor that died: ``RayActorError``; a hang: ``TimeoutError``).
    """
    ray = import_ray()
    if isinstance(error, ray.exceptions.RayTaskError):
        try:
            unwrapped: BaseException = error.as_instanceof_cause()
            return unwrapped
        except Exception:  # a cause Ray cannot subclass: keep Ray's own error
            return error
    return error


def describe(error: BaseException) -> str:
    """One line naming what went wrong (the original exception for a ``RayTaskError``)."""
    cause = getattr(error, "cause", None)
    shown = cause if isinstance(cause, BaseException) else error
    lines = str(shown).strip().splitlines()
    return f"{type(shown).__name__}: {lines[0][:200] if lines else ''}"
