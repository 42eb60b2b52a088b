"""The forms ``update_policy_weights_`` accepts, reduced to ``{model_id: weights-or-None}``.

Examples:
    >>> import torch
    >>> forms = weight_update_forms(torch.nn.Linear(2, 1))
    >>> list(forms), sorted(as_weights(forms["policy"]).keys())
    (['policy'], ['bias', 'weight'])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.data.checks import short_repr

__all__ = ["UnknownKeyError", "apply_weights", "as_weights", "check_model_ids", "check_source",
           "check_update", "check_weights", "per_worker_weights", "weight_update_forms", "worker_indices"]


class UnknownKeyError(KeyError, ValueError):
    """A model id or weight key that does not exist: a ``KeyError`` (as the mappings raise) and a
    ``ValueError`` (a bad argument value), whose message is printed as is."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def per_worker_weights(source: Any) -> dict[int, Any] | None:
    """``{worker index: weights}`` when ``source`` is such a dict (every key an int, every value
    a module, a TensorDict or a dict): each worker gets its own weights (workers that build
    distinct policies); ``None`` for any other form (``{1: tensor}`` is a state dict with a bad key).

    Examples:
        >>> weights = {"weight": torch.zeros(1)}
        >>> per_worker_weights({0: weights}), per_worker_weights(weights)
        ({0: {'weight': tensor([0.])}}, None)
    """
    if not isinstance(source, Mapping) or isinstance(source, TensorDictBase) or len(source) == 0:
        return None
    keys = list(source)
    if not all(isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) for k in keys):
        return None
    if not all(isinstance(source[k], (torch.nn.Module, Mapping)) for k in keys):  # (TensorDicts too)
        return None
    return {int(k): source[k] for k in keys}


def check_source(name: str, source: Any) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``source`` is weights ``update_policy_weights_``
    takes: ``None`` (pull), an ``nn.Module``, a TensorDict, or a dict (possibly nested, or with
    dotted keys) of tensors or numpy arrays."""
    if source is None or isinstance(source, (torch.nn.Module, TensorDictBase)):
        return
    if not isinstance(source, Mapping):
        raise TypeError(f"{name} must be an nn.Module, a TensorDict or a dict of tensors (a state_dict), got "
                        f"{type(source).__name__} {short_repr(source)}")
    for key, value in source.items():
        if not isinstance(key, str):
            raise TypeError(f"{name} has the key {key!r} ({type(key).__name__}); weight names are strings")
        if isinstance(value, Mapping):
            check_source(f"{name}[{key!r}]", value)
        elif not isinstance(value, (torch.Tensor, np.ndarray)):
            raise TypeError(f"{name}[{key!r}] must be a tensor, got {type(value).__name__} "
                            f"{short_repr(value)}")


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
        TypeError: weights that are no module, TensorDict or dict of tensors, a ``model_id`` that is
            no string, a ``weights_dict`` that is no dict (each names the argument and the value).
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
    if model_id is not None and not isinstance(model_id, str):
        raise TypeError(f"model_id must be a model id (str) or None, got {model_id!r} "
                        f"({type(model_id).__name__})")
    if weights_dict is not None:
        if model_id is not None or source is not None:
            raise ValueError(
                "weights_dict updates several models at once and excludes model_id, "
                f"policy_or_weights, weights and policy; got weights_dict with {named or ['model_id']}"
            )
        if not isinstance(weights_dict, Mapping):
            raise TypeError(f"weights_dict must be a dict {{model_id: weights}}, got "
                            f"{type(weights_dict).__name__} {short_repr(weights_dict)}")
        for key, value in weights_dict.items():
            if not isinstance(key, str):
                raise TypeError(f"weights_dict keys must be model ids (str), got {key!r} "
                                f"({type(key).__name__})")
            check_source(f"weights_dict[{key!r}]", value)
        return dict(weights_dict)
    if named:
        check_source(named[0], source)
    return {model_id or "policy": source}


def as_weights(source: Any) -> TensorDictBase:
    """Weights as a nested TensorDict of plain tensors (detached: no autograd history travels or
    is copied), from a module, a TensorDict (``TensorDict.from_module(policy)`` included), or a
    (state) dict; the tensors share their memory with ``source``.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(source, torch.nn.Module):
        return TensorDict.from_module(source).data
    if isinstance(source, TensorDictBase):
        return source.detach()
    if isinstance(source, Mapping):
        td = TensorDict(dict(source)).detach()
        return td.unflatten_keys(".") if any("." in k for k in source) else td
    raise TypeError(
        f"weights must be an nn.Module, a TensorDict or a dict of tensors, got {type(source).__name__} "
        f"{short_repr(source)}"
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
        UnknownKeyError: a key that the model does not have (its keys are listed; a ``KeyError`` and a
            ``ValueError``).
        ValueError: a tensor whose shape differs from the model's (the key and both shapes named).
        TypeError: a tensor of another kind of dtype (bool, integer, floating-point, complex).
    """
    known = set(reference.keys(True, True))
    unknown = set(weights.keys(True, True)) - known
    if unknown:
        raise UnknownKeyError(f"weights for {model_id!r} hold {_dotted(unknown)} which the module does "
                              f"not have (it has {_dotted(known)})")
    for key in weights.keys(True, True):
        value, target = weights.get(key), reference.get(key)
        if value.layout != torch.strided:
            raise TypeError(f"weights for {model_id!r}: {_dotted([key])[0]!r} is a {value.layout} tensor; "
                            "weights are sent dense: value.to_dense()")
        if value.device.type == "meta":
            raise ValueError(f"weights for {model_id!r}: {_dotted([key])[0]!r} is on the meta device (a "
                             "tensor without data): send weights with values")
        if value.shape != target.shape:
            raise ValueError(f"weights for {model_id!r}: {_dotted([key])[0]!r} has shape "
                             f"{tuple(value.shape)}, the module's has {tuple(target.shape)}")
        if _dtype_kind(value.dtype) != _dtype_kind(target.dtype):
            raise TypeError(f"weights for {model_id!r}: {_dotted([key])[0]!r} has dtype {value.dtype}, the "
                            f"module's has {target.dtype}: a {_dtype_kind(value.dtype)} tensor cannot "
                            f"update a {_dtype_kind(target.dtype)} one")


def _dtype_kind(dtype: torch.dtype) -> str:
    """``"bool"``, ``"complex"``, ``"floating-point"`` or ``"integer"``: an update keeps its weight's kind
    (float64 weights may update float32 ones; a bool or an integer one may not)."""
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "floating-point" if dtype.is_floating_point else "integer"


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
    """Raise :class:`UnknownKeyError` (a ``KeyError``) naming the known ids if one of ``model_ids`` is
    unknown."""
    known = list(known)
    unknown = sorted(set(model_ids) - set(known), key=repr)
    if unknown:
        raise UnknownKeyError(f"unknown model id(s) {unknown}; known: {list(known)}")


def worker_indices(worker_ids: Any, num_workers: int, policy_device: Any = None) -> list[int] | None:
    """``update_policy_weights_(worker_ids=...)`` as a sorted list of worker indices (``None``:
    every worker): ints in ``range(num_workers)``, or devices, which name the workers whose policy
    runs there (all of them, on ``policy_device``; ``None``: the CPU).

    Examples:
        >>> worker_indices([2, 0], 3), worker_indices(np.arange(2), 3), worker_indices("cpu", 2)
        ([0, 2], [0, 1], [0, 1])
        >>> worker_indices(3, 3)
        Traceback (most recent call last):
        ...
        ValueError: worker_ids=3: worker 3 is out of range for num_workers=3
    """
    if worker_ids is None:
        return None
    if isinstance(worker_ids, np.ndarray) and worker_ids.ndim <= 1 and worker_ids.dtype.kind in "iu":
        worker_ids = worker_ids.tolist()
    items = list(worker_ids) if isinstance(worker_ids, (list, tuple, range)) else [worker_ids]
    ids: set[int] = set()
    for item in items:
        if isinstance(item, (torch.device, str)):
            try:
                device = torch.device(item)
            except (RuntimeError, ValueError):
                raise ValueError(f"worker_ids={worker_ids!r}: {item!r} is neither a worker index nor a "
                                 "device") from None
            if device != torch.device(policy_device or "cpu"):
                raise ValueError(f"worker_ids={item!r}: the workers' policy runs on "
                                 f"{policy_device or 'cpu'}, not {device}")
            ids.update(range(num_workers))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            if not 0 <= item < num_workers:
                raise ValueError(f"worker_ids={worker_ids!r}: worker {int(item)} is out of range for "
                                 f"num_workers={num_workers}")
            ids.add(int(item))
        else:
            raise TypeError(f"worker_ids must be ints or devices, got {item!r} ({type(item).__name__})")
    return sorted(ids)
