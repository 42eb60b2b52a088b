"""The forms ``update_policy_weights_`` accepts, reduced to ``{model_id: weights-or-None}``.

Example:
    >>> import torch
    >>> forms = weight_update_forms(torch.nn.Linear(2, 1))
    >>> list(forms), sorted(as_weights(forms["policy"]).keys())
    (['policy'], ['bias', 'weight'])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["apply_weights", "as_weights", "check_model_ids", "check_update", "check_weights",
           "weight_update_forms"]


def weight_update_forms(
    policy_or_weights: Any = None,
    *,
    weights: Any = None,
    policy: Any = None,
    model_id: str | None = None,
    weights_dict: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Normalise the reference API's calling conventions; ``None`` values mean "pull".

    Raises:
        ValueError: two forms that exclude each other were given together.
    """
    given = {
        "policy_or_weights": policy_or_weights,
        "weights": weights,
        "policy": policy,
    }
    named = [name for name, value in given.items() if value is not None]
    if len(named) > 1:
        raise ValueError(f"give the weights once: got {' and '.join(named)} together")
    source = next((given[name] for name in named), None)
    if weights_dict is not None:
        if model_id is not None or source is not None:
            raise ValueError(
                "weights_dict updates several models at once and excludes model_id, "
                f"policy_or_weights, weights and policy; got weights_dict with {named or ['model_id']}"
            )
        return dict(weights_dict)
    return {model_id or "policy": source}


def as_weights(source: Any) -> TensorDictBase:
    """Weights as a nested TensorDict: from a module, a TensorDict, or a (state) dict.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(source, torch.nn.Module):
        return TensorDict.from_module(source).data
    if isinstance(source, TensorDictBase):
        return source
    if isinstance(source, Mapping):
        td = TensorDict(dict(source))
        return td.unflatten_keys(".") if any("." in k for k in source) else td
    raise TypeError(
        f"weights must be an nn.Module, a TensorDict or a dict of tensors, got {type(source).__name__}"
    )


def apply_weights(module: torch.nn.Module, weights: TensorDictBase, model_id: str = "policy") -> None:
    """Copy ``weights`` into ``module``'s parameters and buffers in place (checked first, see
    :func:`check_weights`)."""
    target = TensorDict.from_module(module).data
    check_weights(model_id, weights, target)
    with torch.no_grad():
        target.update_(weights)


def check_weights(model_id: str, weights: TensorDictBase, reference: TensorDictBase) -> None:
    """Raise before anything is written if ``weights`` do not fit ``reference`` (a model's weights).

    Raises:
        KeyError: a key that the model does not have (its keys are listed).
        ValueError: a tensor whose shape differs from the model's (the key and both shapes named).
    """
    known = set(reference.keys(True, True))
    unknown = set(weights.keys(True, True)) - known
    if unknown:
        raise KeyError(f"weights for {model_id!r} hold {_dotted(unknown)} which the module does "
                       f"not have (it has {_dotted(known)})")
    for key in weights.keys(True, True):
        given, expected = weights.get(key).shape, reference.get(key).shape
        if given != expected:
            raise ValueError(f"weights for {model_id!r}: {_dotted([key])[0]!r} has shape {tuple(given)}, "
                             f"the module's has {tuple(expected)}")


def check_update(weights: Mapping[str, TensorDictBase], reference: Mapping[str, TensorDictBase]) -> None:
    """Check an update ``{model_id: weights}`` against each model's weights before anything is
    written: model ids (:func:`check_model_ids`), then keys and shapes (:func:`check_weights`)."""
    check_model_ids(weights, reference)
    for model_id, td in weights.items():
        check_weights(model_id, td, reference[model_id])


def _dotted(keys: Iterable[Any]) -> list[str]:
    """Nested TensorDict keys as sorted ``"a.b"`` strings."""
    return sorted(".".join(key) if isinstance(key, tuple) else str(key) for key in keys)


def check_model_ids(model_ids: Iterable[str], known: Iterable[str]) -> None:
    """Raise ``KeyError`` naming the known ids if one of ``model_ids`` is unknown."""
    unknown = sorted(set(model_ids) - set(known))
    if unknown:
        raise KeyError(f"unknown model id(s) {unknown}; known: {list(known)}")
