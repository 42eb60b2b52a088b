"""Starting Ray for a :class:`~rlcollect.RayCollector`: a local cluster it starts itself runs with
Ray's token authentication, or it says so.

Ray's processes listen on the machine's addresses, not on loopback only (Ray 2.60 binds its gRPC
servers to every interface, whatever ``_node_ip_address`` says), and a Ray cluster runs any code a
client that reaches it submits. Ray 2.52 and later can require a token of every client
(``RAY_AUTH_MODE=token`` in the environment before Ray is imported; Ray generates the token of a
local cluster and keeps it in ``~/.ray/auth_token``), and Ray 2.59 and later turn it on for a local
``ray.init()`` themselves unless ``RAY_AUTH_MODE`` says otherwise. A collector that starts a local
cluster warns where that cluster would run without it: ``RAY_AUTH_MODE=disabled``, a Ray that does
not turn it on by itself (2.52 to 2.58: set ``RAY_AUTH_MODE=token``), or one without it (older
than 2.52). Joining a cluster (``ray_init_config={"address": ...}`` or ``RAY_ADDRESS``) changes
nothing: that cluster's settings are its owner's.

Examples:
    >>> import os, warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     check_local_ray_authentication()  # Ray 2.60 here: its own default is token
    >>> [str(w.message) for w in caught] if os.environ.get(AUTH_MODE) in (None, "token") else []
    []
"""

from __future__ import annotations

import importlib.util
import math
import os
import warnings
from typing import Any

from rlcollect.common.callers import outside_stacklevel

__all__ = ["AUTH_MODE", "check_local_ray_authentication", "start_ray"]

#: the environment variable that sets Ray's authentication mode (``"token"`` or ``"disabled"``)
AUTH_MODE = "RAY_AUTH_MODE"


def start_ray(ray: Any, ray_init_config: dict[str, Any], actor_cpus: list[float]) -> bool:
    """``ray.init`` unless Ray is initialised; whether this call initialised it (then the caller
    shuts it down). Without an address (in ``ray_init_config`` or ``RAY_ADDRESS``) it starts a new
    local cluster: sized for ``actor_cpus``, without a dashboard, with token authentication or a
    warning (:func:`check_local_ray_authentication`)."""
    if ray.is_initialized():
        return False
    config = dict(ray_init_config)
    if "address" not in config and not os.environ.get("RAY_ADDRESS"):
        config["address"] = "local"  # a new local Ray, whatever a crashed run left in /tmp/ray
        needed = sum(max(1, math.ceil(cpus)) for cpus in actor_cpus)
        config.setdefault("num_cpus", max(os.cpu_count() or 1, needed))
        config.setdefault("include_dashboard", False)
        check_local_ray_authentication()
    ray.init(**config)
    return True


def _ray_has(module: str, name: str = "") -> bool:
    """Whether Ray's module ``module`` exists (and holds ``name``), without importing Ray's others."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
    return found and (not name or hasattr(importlib.import_module(module), name))


def check_local_ray_authentication() -> None:
    """Warn (``RuntimeWarning``) if a local cluster started now would run without Ray's token
    authentication; nothing is changed (the mode is read by Ray when it is imported)."""
    mode = os.environ.get(AUTH_MODE)
    if mode is not None and mode.lower() == "token":
        return
    tokens = "ray._private.authentication.authentication_token_setup"
    if mode is not None:
        why = f"{AUTH_MODE}={mode}"
    elif not _ray_has(tokens):
        why = "this Ray, older than 2.52, has no token authentication"
    elif not _ray_has(tokens, "enable_token_auth_by_default"):
        why = f"this Ray, older than 2.59, turns it on only with {AUTH_MODE}=token"
    else:
        return  # Ray turns it on for a local cluster itself
    warnings.warn(f"RayCollector starts a local Ray cluster without authentication ({why}): its "
                  "processes listen on this machine's addresses, and anyone who reaches them can run "
                  f"code on it. Set {AUTH_MODE}=token before Python starts (Ray 2.52 or later), or keep "
                  "the machine on a network only you reach", RuntimeWarning, stacklevel=outside_stacklevel())
