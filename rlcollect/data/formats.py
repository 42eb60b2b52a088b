"""The batch layouts a collector delivers, as objects: the native one here, TorchRL's in
:mod:`rlcollect.torchrl.layout`.

A collector fills the native layout (``[N, T]``; see :mod:`rlcollect.data.buffers`) and hands each
batch to its layout's :meth:`~NativeLayout.format` on the way out, then to the batch steps it was
given (``batch_steps=``), each a callable ``step(batch, shape) -> batch`` told by a
:class:`BatchShape` how the batch's dims are laid out.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> native = TensorDict({"observation": torch.zeros(4, 3, 2), "policy_version": torch.zeros(4, 3),
    ...                      "next": {"done": torch.zeros(4, 3, 1, dtype=torch.bool)}}, [4, 3])
    >>> out, shape = layout_of("rlcollect").format(native, BatchShape(workers=2))
    >>> out is native, shape.stacked  # as collected: two workers' rows one after the other
    (True, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

from tensordict import TensorDictBase

from rlcollect.data.checks import short_repr

__all__ = ["BatchShape", "BatchStep", "Layout", "NativeLayout", "layout_of"]


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


class Layout(Protocol):
    """What a collector's ``layout`` option is: how a native batch is handed out. The native one
    (:class:`NativeLayout`) hands it as collected; :mod:`rlcollect.torchrl` gives TorchRL's."""

    #: the layout's name, shown in messages
    name: str
    #: the dtype actions are stored in: ``"space"`` (the action space's) or ``"policy"`` (the
    #: policy's, where both are integer or bool)
    action_dtype: str
    #: a policy that writes no action is refused when the collector is built (else when it acts)
    action_at_build: bool

    def format(self, batch: TensorDictBase, shape: BatchShape) -> tuple[TensorDictBase, BatchShape]:
        """``batch`` (native layout) as delivered, and its shape."""
        ...

    def reports_policy_version(self) -> bool:
        """Whether ``policy_version`` is a number (``Collector.policy_version``)."""
        ...


class NativeLayout:
    """rlcollect's layout (the batch layout of the docs): batches are delivered as collected."""

    name = "rlcollect"
    action_dtype = "space"
    action_at_build = True

    def format(self, batch: TensorDictBase, shape: BatchShape) -> tuple[TensorDictBase, BatchShape]:
        """``batch`` as delivered, and its shape."""
        return batch, shape

    def reports_policy_version(self) -> bool:
        """The native layout always stamps ``policy_version``."""
        return True

    def __repr__(self) -> str:
        return f"{self.name!r}"


def layout_of(value: Any) -> Layout:
    """The ``layout`` option as an object: ``"rlcollect"`` or a :class:`Layout` object."""
    if isinstance(value, str) and value == NativeLayout.name:
        return NativeLayout()
    methods, fields = ("format", "reports_policy_version"), ("action_dtype", "action_at_build")
    if (not isinstance(value, str) and all(hasattr(value, name) for name in fields)
            and all(callable(getattr(value, name, None)) for name in methods)):
        return cast(Layout, value)
    raise ValueError(f"layout={short_repr(value)} is not 'rlcollect' or a layout object (a Layout of "
                     f"rlcollect.data.formats: {', '.join(methods + fields)}; rlcollect.torchrl's "
                     "collectors deliver TorchRL's layout, and its layout object gives it to any collector)")
