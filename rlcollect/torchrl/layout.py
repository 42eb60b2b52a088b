"""The batch in TorchRL's collector layout: what :mod:`rlcollect.torchrl`'s collectors deliver by
default, and any collector given ``layout=TorchRLLayout()``.

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
    >>> out, shape = TorchRLLayout().format(native, BatchShape())
    >>> out.batch_size, shape.stacked
    (torch.Size([1, 3]), False)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase

from rlcollect.data.formats import BatchShape
from rlcollect.data.layout import is_private_key

__all__ = ["ROOT_FLAGS", "TorchRLLayout", "torchrl_layout"]

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


@dataclass
class TorchRLLayout:
    """TorchRL's layout as a collector's ``layout`` object (see the module docstring): root
    ``done`` / ``terminated`` / ``truncated``, ``[T]`` for one unbatched TorchRL env, a
    synchronous batch of several workers stacked ``[workers, *batch, T]``, ``policy_version``
    only when tracked, and actions in the policy's dtype.

    Attributes:
        track_policy_version: stamp ``policy_version`` at the root and in ``"next"`` (TorchRL's
            argument of that name; ``False``: the batches hold none and ``policy_version`` is
            ``None``).
        private_keys: keep the keys with a part that starts with ``_`` (a policy's private
            state, such as an exploration module's noise); TorchRL leaves them out (``False``).
    """

    track_policy_version: bool = False
    private_keys: bool = False
    name = "torchrl"
    action_dtype = "policy"
    #: as in TorchRL, a collector whose policy writes no action is built (its env transforms can
    #: be looked at) and fails when the policy first acts
    action_at_build = False

    def format(self, batch: TensorDictBase, shape: BatchShape) -> tuple[TensorDictBase, BatchShape]:
        """``batch`` (native, or whole TensorDicts already stacked by worker) in TorchRL's layout."""
        workers = 1 if shape.stacked else shape.workers
        out = torchrl_layout(batch, unbatched=shape.unbatched, track_policy_version=self.track_policy_version,
                             workers=workers)
        if workers > 1 and batch.batch_dims == 2:
            shape = BatchShape(shape.workers, stacked=True, unbatched=shape.unbatched)
        if not self.private_keys:
            out = out.exclude(*[key for key in out.keys(True) if is_private_key(key)])
        return out, shape

    def reports_policy_version(self) -> bool:
        """Whether ``policy_version`` is a number: only when tracked, as in TorchRL."""
        return self.track_policy_version
