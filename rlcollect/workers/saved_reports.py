"""Batches in flight inside a collector's ``state_dict``: a :class:`BatchReport` as tensors, numbers
and strings only, so that a saved state loads with ``torch.load(path)`` (``weights_only=True``,
torch's default), which refuses numpy arrays, dataclasses and TensorDicts.

Examples:
    >>> import numpy as np
    >>> report = BatchReport(slot=0, steps=3, policy_version=1, next_traj_id=4, frames=6,
    ...                      collect_seconds=0.1, episodes=1,
    ...                      episode_records={"return": np.array([2.0])},
    ...                      data=[(("next", "reward"), np.ones((2, 3, 1), np.float32))])
    >>> saved = report_state(report)
    >>> type(saved["data"][0][1]).__name__
    'Tensor'
    >>> restored = report_from_state(saved)
    >>> restored.data[0][1].shape, restored.episode_records["return"].tolist()
    ((2, 3, 1), [2.0])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.workers.worker import BatchReport

__all__ = ["report_from_state", "report_state"]


def _tensor(array: np.ndarray) -> Any:
    try:  # a copy: Ray hands out read-only views, several into one buffer (torch.save refuses those)
        return torch.from_numpy(np.array(array))
    except TypeError:  # a dtype torch lacks: kept as it is
        return array


def _array(value: Any) -> Any:
    return value.numpy() if isinstance(value, torch.Tensor) else value


def report_state(report: BatchReport) -> dict[str, Any]:
    """``report`` as a dict of its fields, arrays as tensors, a batch as its size and leaves."""
    state = {field.name: getattr(report, field.name) for field in dataclasses.fields(report)}
    state["episode_records"] = {name: _tensor(array) for name, array in report.episode_records.items()}
    if report.data is not None:
        state["data"] = [(key, _tensor(array)) for key, array in report.data]
    batch = report.batch
    if isinstance(batch, TensorDict):  # a lazy stack (no TensorDict) is kept as it is
        state["batch"] = {"batch_size": list(batch.batch_size),
                          "leaves": [(key, leaf.clone() if isinstance(leaf, torch.Tensor) else leaf)
                                     for key, leaf in batch.items(include_nested=True, leaves_only=True)]}
    return state


def report_from_state(state: Mapping[str, Any] | BatchReport) -> BatchReport:
    """The :class:`BatchReport` that :func:`report_state` saved (a report itself is returned as it is)."""
    if isinstance(state, BatchReport):
        return state
    fields = dict(state)
    fields["episode_records"] = {name: _array(value) for name, value in state["episode_records"].items()}
    if state["data"] is not None:
        fields["data"] = [(key, _array(value)) for key, value in state["data"]]
    batch = state["batch"]
    if isinstance(batch, Mapping):
        rebuilt = TensorDict({}, batch_size=batch["batch_size"])
        for key, leaf in batch["leaves"]:
            rebuilt.set(key, leaf)
        fields["batch"] = rebuilt
    return BatchReport(**fields)
