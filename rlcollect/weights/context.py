"""What a receiver scheme asks of the collector it feeds (its ``context``).

Examples:
    >>> import torch
    >>> class Holder:
    ...     policy = torch.nn.Linear(2, 1)
    >>> context_model(Holder(), "policy") is Holder.policy
    True
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["WeightContext", "context_model"]


@runtime_checkable
class WeightContext(Protocol):
    """What a receiver scheme asks of its ``context`` (a collector): the module the weights of a
    model id are applied to."""

    def receiver_model(self, model_id: str) -> torch.nn.Module: ...


def context_model(context: Any, model_id: str) -> torch.nn.Module:
    """``context``'s module of ``model_id``: its :class:`WeightContext` method, else (another kind
    of context object, as TorchRL's schemes take) its attribute of that name."""
    if isinstance(context, WeightContext):
        return context.receiver_model(model_id)
    model = getattr(context, model_id, None)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"init_on_receiver(model_id={model_id!r}, context=...): the context has no module "
                         f"{model_id!r} (pass model=)")
    return model
