"""Whether the parameters of a module that acts were changed in place since the collector last looked.

A collector that runs your policy module itself (one process, on the module's own device) acts
with every change you make to it: an optimizer step between two batches changes the actions of
the next one. Its frames are stamped with the version of the weights that chose them, so such a
change must start a new version even where ``update_policy_weights_()`` is not called. Each
parameter's version counter (bumped by every in-place write: an optimizer step,
``load_state_dict``, ``copy_`` under ``no_grad``) and its storage tell, at a cost of well under a
microsecond per parameter tensor. Writes through ``param.data`` bypass the counter and are not
seen: call ``update_policy_weights_()`` after them.

Examples:
    >>> import torch
    >>> policy = torch.nn.Linear(2, 1)
    >>> watch = ParameterWatch(policy)
    >>> watch.changed()
    False
    >>> with torch.no_grad():
    ...     _ = policy.weight.add_(1.0)  # what an optimizer step does
    >>> watch.changed(), watch.changed()  # each call looks again
    (True, False)
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from rlcollect.common.callers import outside_stacklevel

__all__ = ["ParameterWatch", "StaleWeightsWarning", "UnsentEdits"]


class StaleWeightsWarning(UserWarning):
    """The policy you passed was trained in place, but the copies that act were never sent its
    weights (see :class:`UnsentEdits`)."""


def _fingerprint(module: torch.nn.Module | None) -> tuple[Any, ...]:
    """Each parameter's identity, version counter and storage."""
    if module is None:
        return ()
    marks = []
    for param in module.parameters():
        try:
            where = param.data_ptr()
        except ValueError:  # a lazy module's parameter, not built yet
            where = -1
        marks.append((id(param), param._version, where))
    return tuple(marks)


class ParameterWatch:
    """Watches the parameters of ``module`` (``None``: nothing to watch, never changed)."""

    def __init__(self, module: Any) -> None:
        self._module = module if isinstance(module, torch.nn.Module) else None
        self._seen = _fingerprint(self._module)

    def changed(self) -> bool:
        """Whether a parameter was written, added, removed or replaced since the last call (or the
        construction); the next call compares with now."""
        now = _fingerprint(self._module)
        changed, self._seen = now != self._seen, now
        return changed


class UnsentEdits:
    """Warns once (:class:`StaleWeightsWarning`) where the policy module you passed to a collector
    whose policy copies act (worker processes, Ray actors, a policy server) was edited in place,
    ``patience`` batches were then asked for, and ``update_policy_weights_()`` was never called:
    the copies still act with the weights they started with. TorchRL's workers on the CPU share
    your policy's parameters and follow such edits; rlcollect's are sent the weights, so that each
    frame's ``policy_version`` names the weights that chose it. Once weights were sent, nothing is
    said: sending them every few batches is a choice.

    Examples:
        >>> import torch
        >>> policy = torch.nn.Linear(2, 1)
        >>> unsent = UnsentEdits(policy, patience=2)
        >>> with torch.no_grad():
        ...     _ = policy.weight.add_(1.0)
        >>> unsent.requested()
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     unsent.requested()
        >>> caught[0].category.__name__
        'StaleWeightsWarning'
    """

    def __init__(self, policy: Any, patience: int = 10) -> None:
        self._watch = ParameterWatch(policy)
        self._patience = patience
        self._since: int | None = None  # batches asked for since the first edit seen
        self._done = not isinstance(policy, torch.nn.Module)  # sent, or warned: nothing more to say

    def requested(self) -> None:
        """A batch was asked for (a synchronous batch of every worker, or one worker's)."""
        if self._done:
            return
        if self._since is None and self._watch.changed():
            self._since = 0
        if self._since is not None:
            self._since += 1
            if self._since >= self._patience:
                self._done = True
                warnings.warn(
                    f"the policy you passed was changed in place (an optimizer step?) {self._since} batches "
                    "ago, but the copies that act (workers, actors, a policy server, a copy on "
                    "policy_device) were never sent weights: they still act with the weights they "
                    "started with. Call collector.update_policy_weights_() after your updates (TorchRL's "
                    "CPU workers shared your policy's parameters; rlcollect's are sent them, and stamp "
                    "each frame with their version)", StaleWeightsWarning, stacklevel=outside_stacklevel())

    def sent(self) -> None:
        """Weights were sent: the learner knows how to reach the copies."""
        self._done = True
