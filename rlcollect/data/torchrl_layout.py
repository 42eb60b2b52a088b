"""The batch in TorchRL's collector layout: what every collector delivers with ``layout="torchrl"``.

The engine always fills the native layout (``[N, T]``; see :mod:`rlcollect.data.buffers`). This is
a view of that batch, sharing its tensors (nothing is copied), that differs where TorchRL's
collectors differ:

- the root holds ``done``, ``terminated`` and ``truncated``: the flags of the state the action was
  chosen in. They are all False in collected data, as in TorchRL (an env that is done is reset
  before its next step);
- ``policy_version`` is at the root and in ``"next"`` with ``track_policy_version=True``, and
  absent otherwise (the native layout always stamps it at the root);
- a batch of one env without a batch size of its own (a TorchRL env with ``batch_size=[]``) is
  ``[T]`` instead of ``[1, T]``;
- a synchronous multi-worker batch is stacked by worker, as TorchRL's default:
  ``[workers, envs, T]`` (``[workers, T]`` for unbatched envs); :mod:`rlcollect.torchrl` groups
  it otherwise when asked.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> native = TensorDict({"observation": torch.zeros(1, 3, 4), "policy_version": torch.zeros(1, 3),
    ...                      ("next", "done"): torch.zeros(1, 3, 1, dtype=torch.bool)}, [1, 3])
    >>> batch = torchrl_layout(native, unbatched=True, track_policy_version=False)
    >>> batch.batch_size, "done" in batch.keys(), "policy_version" in batch.keys()
    (torch.Size([3]), True, False)
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

__all__ = ["ROOT_FLAGS", "torchrl_layout"]

#: The flags TorchRL keeps at the root as well as in ``"next"``.
ROOT_FLAGS = ("done", "terminated", "truncated")


def torchrl_layout(
    batch: TensorDictBase,
    *,
    unbatched: bool,
    track_policy_version: bool,
    workers: int = 1,
) -> TensorDictBase:
    """``batch`` (native layout) in TorchRL's layout; see the module docstring.

    Args:
        batch: a native batch, ``[N, T]`` or regrouped (``split_trajs``, ``trajs_per_batch``).
        unbatched: each env has no batch size of its own: ``[1, T]`` is given as ``[T]``.
        track_policy_version: keep ``policy_version`` (at the root and in ``"next"``).
        workers: the batch is ``workers`` workers' rows, one after the other (a synchronous
            multi-worker batch), stacked ``[workers, envs, T]``; 1: one env batch.
    """
    out = batch.copy() if track_policy_version else batch.exclude("policy_version")
    for key in ROOT_FLAGS:  # (a flag the env does not have, as a TorchRL env's own keys, is not added)
        flag = batch.get(("next", key), None)
        if key not in out and flag is not None:
            out.set(key, torch.zeros_like(flag))
    if track_policy_version:
        out.set(("next", "policy_version"), batch.get("policy_version"))
    if out.batch_dims != 2:
        return out
    if workers > 1:
        envs, steps = out.batch_size[0] // workers, out.batch_size[1]
        out = out.reshape(workers, steps) if unbatched else out.reshape(workers, envs, steps)
        out.names = [None] * (out.batch_dims - 1) + ["time"]
        return out
    if unbatched and out.batch_size[0] == 1:
        out = out[0]
    return out
