"""The envs' step infos kept in the batch (``info_keys``): their layout, from one step of the first
env, and each step's writes, checked.

Gymnasium envs return an ``info`` dict at every step (``is_success``, ``lives``, a MuJoCo env's
``x_position``, ...). The keys a collector is given are stored at ``("next", "info", key)``, one
value per frame, as the step returned it: the value's shape and dtype at the first env's first
step lay out the batch (a Python float is float64, an int int64, a bool bool), and every later
value must fit them. A key missing from a step's info, or a value that does not fit, is a
:class:`~rlcollect.data.checks.BadDataError` naming the env, the step and the key: a batch never
holds a zero that the env did not return. Where an episode ends, the value is the final step's
(a vector env's ``info["final_info"]``), never the reset's.

Examples:
    >>> import numpy as np
    >>> [str(f) for f in info_fields({"is_success": 0.0, "lives": np.int32(3)}, ("lives", "is_success"),
    ...                              source="env 0")]
    ['lives: () torch.int32', 'is_success: () torch.float64']
    >>> arrays = {"lives": np.zeros((2, 4), dtype=np.int32)}  # [envs, steps]
    >>> write_info(arrays, 1, 0, {"lives": 3}, checking=True)
    >>> arrays["lives"][1, 0]
    np.int32(3)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlcollect.data.checks import BadDataError, short_repr
from rlcollect.data.layout import Field, torch_dtype

__all__ = ["info_fields", "vector_info_row", "write_info", "write_vector_infos"]


def info_fields(info: Mapping[str, Any], keys: Sequence[str], *, source: str) -> tuple[Field, ...]:
    """The batch fields of ``keys``, laid out from their values in ``info`` (``source`` names
    where it came from, for the errors)."""
    missing = [key for key in keys if key not in info]
    if missing:
        raise ValueError(f"info_keys={list(keys)}: {missing} not in the info {source} returned "
                         f"(its keys: {sorted(map(str, info))})")
    fields = []
    for key in keys:
        value = np.asarray(info[key])
        if value.dtype.kind not in "biuf":
            raise TypeError(f"info_keys: info[{key!r}] is {short_repr(info[key], 60)} "
                            f"({type(info[key]).__name__}) from {source}; only numbers, bools and numeric "
                            "arrays are stored")
        fields.append(Field((key,), tuple(value.shape), torch_dtype(value.dtype)))
    return tuple(fields)


def _checked(value: Any, array: np.ndarray, key: str, env: int, step: int) -> Any:
    """``value`` where it fits ``array``'s per-frame shape and dtype without a cast that changes it."""
    given, shape, what = np.asarray(value), array.shape[2:], f"info[{key!r}]"
    if given.dtype.kind not in "biuf":
        raise BadDataError(what, env, step, f"is {type(value).__name__} {short_repr(value, 60)}; "
                           f"the first step's was {array.dtype} of shape {shape}")
    if given.shape != shape:
        raise BadDataError(what, env, step, f"has shape {given.shape}; the first step's had {shape}")
    if not _fits(given, array.dtype):
        raise BadDataError(what, env, step, f"is {given.dtype} {short_repr(value, 60)}; the first "
                           f"step's was {array.dtype}, which does not hold it unchanged")
    return given


def _fits(given: np.ndarray, dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` holds ``given``'s values: bools only bools; integers integers in its range;
    floats any number."""
    if dtype.kind == "b":
        return given.dtype.kind == "b"
    if dtype.kind in "iu":
        limits = np.iinfo(dtype)
        return given.dtype.kind in "biu" and (not given.size or (
            int(given.min()) >= limits.min and int(given.max()) <= limits.max))
    return True


def write_info(arrays: Mapping[str, np.ndarray], env: int, step: int, info: Mapping[str, Any], *,
               checking: bool) -> None:
    """Write env ``env``'s step ``step`` values of ``info`` into ``arrays`` (``[N, T, ...]`` by key)."""
    for key, array in arrays.items():
        try:
            value = info[key]
        except (KeyError, TypeError):
            raise BadDataError(f"info[{key!r}]", env, step, f"is missing: the step's info has keys "
                               f"{sorted(map(str, info)) if isinstance(info, Mapping) else short_repr(info)}"
                               ) from None
        array[env, step] = _checked(value, array, key, env, step) if checking else value


def vector_info_row(info: Mapping[str, Any], key: str, env: int) -> tuple[bool, Any]:
    """Whether a vector env's ``info`` holds ``key`` for sub-env ``env``, and its value there
    (Gymnasium's layout: an array per key, one row per sub-env, and a ``"_" + key`` mask; EnvPool
    gives no masks: every row is there)."""
    values = info.get(key)
    rows = None if values is None or isinstance(values, Mapping) else np.asarray(values)
    if rows is None or rows.ndim == 0 or env >= len(rows):  # not one row per sub-env (a nested dict)
        return False, None
    mask = info.get("_" + key)
    if mask is not None and not bool(np.asarray(mask)[env]):
        return False, None
    return True, rows[env]


def write_vector_infos(arrays: Mapping[str, np.ndarray], step: int, info: Mapping[str, Any],
                       ended: np.ndarray | None, *, checking: bool) -> None:
    """Write a vector env's step ``step`` infos into ``arrays``; ``ended`` marks the sub-envs that
    reset themselves in this step (``SAME_STEP``), whose values are in ``info["final_info"]``."""
    finals: Mapping[str, Any] = info.get("final_info") or {}
    for key, array in arrays.items():
        values, mask = info.get(key), info.get("_" + key)
        if values is not None and (ended is None or not ended.any()) and (mask is None or np.all(mask)):
            rows = np.asarray(values)  # every sub-env's value: one write, where it fits
            if not checking or (rows.shape == array.shape[:1] + array.shape[2:] and _fits(rows, array.dtype)):
                array[:, step] = rows
                continue
        for env in range(array.shape[0]):  # row by row: final infos, masks, or an error to name
            there, value = vector_info_row(finals if ended is not None and ended[env] else info, key, env)
            if not there:
                raise BadDataError(f"info[{key!r}]", env, step, "is missing from the vector env's step info "
                                   f"(its keys: {sorted(map(str, info))})")
            array[env, step] = _checked(value, array, key, env, step) if checking else value
