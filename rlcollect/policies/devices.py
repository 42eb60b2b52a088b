"""A policy's copy on the device it runs on, as the reference's collectors make it.

Examples:
    >>> import torch
    >>> policy = torch.nn.Linear(2, 1)
    >>> moved, original = policy_on_device(policy, torch.device("meta"))
    >>> next(moved.parameters()).device.type, next(policy.parameters()).device.type
    ('meta', 'cpu')
    >>> sorted(original().keys())
    ['bias', 'weight']
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.common.callers import outside_stacklevel

__all__ = ["policy_on_device", "warn_unmovable"]


def policy_on_device(
    policy: Any, device: Any, *, trust_policy: bool = False
) -> tuple[Any, Callable[[], TensorDictBase] | None]:
    """``policy`` with its parameters and buffers on ``device``, and a function returning the
    original ones (``None`` when nothing was copied).

    Nothing is copied when ``device`` is ``None`` or every tensor is already there. A policy
    without parameters or buffers cannot be moved: it is returned as is, with a warning unless
    ``trust_policy`` (the caller vouches that it runs on ``device``). Otherwise the copy is made
    without copying the weights twice: the module is deep-copied with its tensors on the meta
    device, then given the tensors moved to ``device``.
    """
    if not device:
        return policy, None
    device = torch.device(device)
    weights = TensorDict.from_module(policy, as_module=True) if isinstance(policy, torch.nn.Module) \
        else TensorDict()
    tensors = list(weights.values(True, True))
    warn_unmovable(policy, device, trust_policy=trust_policy)
    if all(tensor.device == device for tensor in tensors):
        return policy, None

    def original(module: Any = policy) -> TensorDictBase:
        return TensorDict.from_module(module).data

    with weights.data.to("meta").to_module(policy):
        moved = copy.deepcopy(policy)
    weights.apply(lambda t: t.data.to(device) if not isinstance(t, torch.nn.Parameter)
                  else torch.nn.Parameter(t.data.to(device), requires_grad=t.requires_grad),
                  filter_empty=False).to_module(moved)
    return moved, original


def warn_unmovable(policy: Any, device: Any, *, trust_policy: bool) -> None:
    """Warn that ``policy`` cannot be moved to ``device`` (it has no parameter or buffer), unless
    no device is asked for or ``trust_policy`` vouches for it (as the reference's collectors)."""
    if not device or trust_policy:
        return
    if isinstance(policy, torch.nn.Module) and (
            next(policy.parameters(), None) is not None or next(policy.buffers(), None) is not None):
        return
    warnings.warn(f"policy_device={device} was given but the policy has no parameter or buffer to move "
                  "there: the collector trusts that it runs on that device (pass trust_policy=True to "
                  "say so and silence this warning)", UserWarning, stacklevel=outside_stacklevel())
