"""The batch layouts a collector delivers, as objects: the native one and TorchRL's.

A collector fills the native layout (``[N, T]``; see :mod:`rlcollect.data.buffers`) and hands each
batch to its layout's :meth:`~NativeLayout.format` on the way out, then to the batch steps it was
given (``batch_steps=``), each a callable ``step(batch, shape) -> batch`` told by a
:class:`BatchShape` how the batch's dims are laid out.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> native = TensorDict({"observation": torch.zeros(4, 3, 2), "policy_version": torch.zeros(4, 3),
    ...                      "next": {"done": torch.zeros(4, 3, 1, dtype=torch.bool)}}, [4, 3])
    >>> out, shape = layout_of("torchrl").format(native, BatchShape(workers=2), track_policy_version=False)
    >>> out.batch_size, shape.stacked, "done" in out.keys()  # two workers' rows stacked, root flags
    (torch.Size([2, 2, 3]), True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

from tensordict import TensorDictBase

from rlcollect.data.checks import short_repr
from rlcollect.data.layout import is_private_key
from rlcollect.data.torchrl_layout import torchrl_layout

__all__ = ["BatchShape", "BatchStep", "NativeLayout", "TorchRLLayout", "layout_of"]


@dataclass(frozen=True)
class BatchShape:
    """How a delivered batch's dims are laid out.

    Attributes:
        workers: the synchronous workers whose rows the batch holds (1: one env batch, or a
            batch regrouped by trajectory).
        stacked: dim 0 indexes those workers (TorchRL's layout stacks them).
        unbatched: each env has no batch size of its own (a TorchRL env of batch size ``[]``).
    """

    workers: int = 1
    stacked: bool = False
    unbatched: bool = False


class BatchStep(Protocol):
    """One step a batch goes through after its layout, before ``storing_device`` and ``postproc``
    (it must pickle: the multi-process collectors run it in their workers for a post-collect hook)."""

    def __call__(self, batch: TensorDictBase, shape: BatchShape) -> TensorDictBase: ...


class NativeLayout:
    """rlcollect's layout (the batch layout of the docs): batches are delivered as collected."""

    name = "rlcollect"
    #: the dtype actions are stored in: the action space's
    action_dtype = "space"
    #: a policy that writes no action is refused when the collector is built
    action_at_build = True

    def format(self, batch: TensorDictBase, shape: BatchShape, *, track_policy_version: bool
               ) -> tuple[TensorDictBase, BatchShape]:
        """``batch`` as delivered, and its shape."""
        return batch, shape

    def reports_policy_version(self, track_policy_version: bool) -> bool:
        """Whether ``policy_version`` is a number (the native layout always stamps it)."""
        return True

    def __repr__(self) -> str:
        return f"{self.name!r}"


@dataclass
class TorchRLLayout:
    """TorchRL's layout (:mod:`rlcollect.data.torchrl_layout`), what ``layout="torchrl"`` means:
    root ``done`` / ``terminated`` / ``truncated``, ``[T]`` for one unbatched TorchRL env, a
    synchronous batch of several workers stacked ``[workers, *batch, T]``, ``policy_version``
    only when tracked, and actions in the policy's dtype.

    Attributes:
        private_keys: keep the keys with a part that starts with ``_`` (a policy's private
            state, such as an exploration module's noise); TorchRL leaves them out (``False``).
    """

    private_keys: bool = False
    name = "torchrl"
    action_dtype = "policy"
    #: as in TorchRL, a collector whose policy writes no action is built (its env transforms can
    #: be looked at) and fails when the policy first acts
    action_at_build = False

    def format(self, batch: TensorDictBase, shape: BatchShape, *, track_policy_version: bool
               ) -> tuple[TensorDictBase, BatchShape]:
        """``batch`` (native, or whole TensorDicts already stacked by worker) in TorchRL's layout."""
        workers = 1 if shape.stacked else shape.workers
        out = torchrl_layout(batch, unbatched=shape.unbatched, track_policy_version=track_policy_version,
                             workers=workers)
        if workers > 1 and batch.batch_dims == 2:
            shape = BatchShape(shape.workers, stacked=True, unbatched=shape.unbatched)
        if not self.private_keys:
            out = out.exclude(*[key for key in out.keys(True) if is_private_key(key)])
        return out, shape

    def reports_policy_version(self, track_policy_version: bool) -> bool:
        """Whether ``policy_version`` is a number: only when tracked, as in TorchRL."""
        return track_policy_version


#: The layouts by name (the collectors' ``layout`` option).
LAYOUTS = {"rlcollect": NativeLayout, "torchrl": TorchRLLayout}


def layout_of(value: Any) -> NativeLayout | TorchRLLayout:
    """The ``layout`` option as an object: a name of :data:`LAYOUTS` or a layout object."""
    if isinstance(value, (NativeLayout, TorchRLLayout)):
        return value
    if isinstance(value, str) and value in LAYOUTS:
        return cast(NativeLayout | TorchRLLayout, LAYOUTS[value]())
    raise ValueError(f"layout={short_repr(value)} is not one of {tuple(LAYOUTS)} (or a TorchRLLayout; see "
                     "rlcollect.data.torchrl_layout)")
