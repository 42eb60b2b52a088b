"""Weight updates handed from the thread that trains to the thread that collects.

A collector collecting in a background thread (``start()``) must not write new weights into the
module a forward pass of that thread is reading, nor change them in the middle of a batch whose
frames are stamped with one ``policy_version``. The caller's thread checks and copies each update
(:func:`staged_copy`) and puts it (:meth:`StagedWeights.put`); before each batch, the collecting
thread takes what arrived (:meth:`StagedWeights.take`) and applies it.

Examples:
    >>> import torch
    >>> net = torch.nn.Linear(2, 1)
    >>> staged = StagedWeights()
    >>> staged.put({"policy": staged_copy("policy", torch.nn.Linear(2, 1), net)})
    >>> staged.put({"policy": None})  # applied already (by a receiver scheme): counts all the same
    >>> forms, count = staged.take()
    >>> sorted(forms), count, staged.take()[1]
    (['policy'], 2, 0)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.weights.forms import as_weights, check_weights

__all__ = ["StagedWeights", "staged_copy"]


def staged_copy(model_id: str, source: Any, target: torch.nn.Module) -> TensorDictBase:
    """``source``'s weights (a module, a TensorDict or a state dict), checked against ``target``'s
    (the error names the key and both shapes) and copied now, in the caller's thread: what the
    caller does to ``source`` afterwards never reaches the copy."""
    weights = as_weights(source)
    check_weights(model_id, weights, TensorDict.from_module(target).data)
    return weights.clone()


class StagedWeights:
    """The updates put since the last :meth:`take`: the latest weights per model id, and how many
    updates they stand for (each one a policy version)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forms: dict[str, TensorDictBase] = {}
        self._count = 0

    def put(self, forms: Mapping[str, TensorDictBase | None]) -> None:
        """One update: ``{model_id: weights}`` (``None``: applied already, a version all the same)."""
        with self._lock:
            self._forms.update({model_id: w for model_id, w in forms.items() if w is not None})
            self._count += 1

    def take(self) -> tuple[dict[str, TensorDictBase], int]:
        """What was put since the last call, and how many updates it stands for (0: nothing)."""
        with self._lock:
            forms, count = self._forms, self._count
            self._forms, self._count = {}, 0
        return forms, count
