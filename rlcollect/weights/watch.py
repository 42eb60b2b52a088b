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

from typing import Any

import torch

__all__ = ["ParameterWatch"]


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
