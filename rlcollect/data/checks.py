"""Bad data never enters a batch: each write is checked for shape and type, each batch for values.

A numpy write broadcasts and casts silently: an observation of shape ``(1,)`` fills all four
features of a ``Box(4,)``, ``None`` becomes NaN, the reward ``"1.0"`` is parsed, ``"no"`` is a true
flag, the action 1.7 becomes 1. So the collectors check at two points, chosen by ``check``:

- ``"full"`` (the default): every observation and flag an env returns, and every action a policy
  returns, before it is written (shape and type; a fast identity test, the full check only when
  that fails; a flag is looked at only when it is not exactly ``False``), then every batch's
  values against the spaces, vectorised.
- ``"batch"``: only the per-batch values (NaN, Box bounds, discrete ranges, finite rewards);
  a wrong shape may then be broadcast.
- ``"off"``: nothing.

Rewards are kept as the envs return them and converted once per batch, at every level: a batch of
real numbers is one numpy conversion; anything else is converted one value at a time by
:func:`checked_reward`, which names the first reward that is not a real number.

Box actions are checked to be finite, not to lie within the bounds: a Gaussian policy's unclipped
action is what its log-probability refers to, and clipping it is the env's job (as in SB3 and
TorchRL). Every error is a :class:`BadDataError` naming the env, the step, and expected vs actual.
The per-batch value check is :class:`rlcollect.data.batch_checks.BatchValueCheck`.

Examples:
    >>> import numpy as np
    >>> checked_array(np.zeros(1), (4,), np.dtype(np.float32), "observation", env=2, step=5)
    Traceback (most recent call last):
    ...
    rlcollect.data.checks.BadDataError: the observation of env 2 at step 5 has shape (1,); the space says (4,)
"""

from __future__ import annotations

import numbers
from typing import Any, TypeGuard

import numpy as np
import torch

from rlcollect.data.layout import get_nested

__all__ = [
    "CHECK_LEVELS",
    "BadDataError",
    "FLAG_TYPES",
    "check_observation",
    "check_vector_step",
    "checked_array",
    "checked_flag",
    "checked_reward",
    "describe",
    "short_repr",
]

#: The values of the collectors' ``check`` option.
CHECK_LEVELS = ("full", "batch", "off")
#: Flag types written without a closer look.
FLAG_TYPES = frozenset({bool, np.bool_})


class BadDataError(ValueError):
    """An env or a policy produced a value that does not fit its space.

    Attributes:
        what: ``"observation"``, ``"reward"``, ``"terminated"``, ``"action"``, ...
        env: the env's index (``None`` when the whole policy output is wrong).
        step: the step within the batch (``None`` for a policy server's forward pass).
        detail: what was wrong: expected vs actual.
        batch: the batch's number in its process, once known.
    """

    def __init__(
        self, what: str, env: int | None, step: int | None, detail: str, batch: int | None = None
    ) -> None:
        self.what, self.env, self.step, self.detail, self.batch = what, env, step, detail, batch
        where = "" if env is None else f" of env {env}"
        when = "" if step is None else f" at step {step}" + ("" if batch is None else f" of batch {batch}")
        super().__init__(f"the {what}{where}{when} {detail}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes
        return type(self), (self.what, self.env, self.step, self.detail, self.batch)

    def located(self, env_offset: int, batch: int) -> BadDataError:
        """The same error with the collector-wide env index and the batch number."""
        env = None if self.env is None else self.env + env_offset
        return BadDataError(self.what, env, self.step, self.detail, batch)


def short_repr(value: Any, limit: int = 120) -> str:
    """``repr(value)`` on one line (runs of whitespace as one space: a numpy array's rows), cut to
    ``limit`` characters, for error messages.

    Examples:
        >>> short_repr("x" * 200, limit=10)
        "'xxxxxx..."
        >>> short_repr(np.zeros((2, 2)))
        'array([[0., 0.], [0., 0.]])'
    """
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(value: Any) -> str:
    """A value for an error message: its type and a short repr, e.g. ``float nan``."""
    return f"{type(value).__name__} {short_repr(value, 60)}"


def _fits(value: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> TypeGuard[np.ndarray]:
    """Whether ``value`` passes :func:`checked_array` as it is: an array of exactly ``shape``,
    of ``dtype``'s kind (an integer no wider)."""
    return (value.__class__ is np.ndarray and value.shape == shape and value.dtype.kind == dtype.kind
            and (dtype.kind not in "iu" or value.dtype.itemsize <= dtype.itemsize))


def checked_array(
    value: Any, shape: tuple[int, ...], dtype: np.dtype[Any], what: str, *, env: int | None, step: int
) -> np.ndarray:
    """``value`` as an array of exactly ``shape`` whose values ``dtype`` holds, or a
    :class:`BadDataError` (never a broadcast, never a float truncated to an integer)."""
    if _fits(value, shape, dtype):
        return value
    if value is None or isinstance(value, (str, bytes)):
        raise BadDataError(
            what, env, step, f"is {describe(value)}; the space says an array of shape {shape} {dtype}"
        )
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise BadDataError(
            what, env, step, f"is {describe(value)} (dtype {array.dtype}); the space says {dtype}"
        )
    if array.shape != shape:
        raise BadDataError(what, env, step, f"has shape {array.shape}; the space says {shape}")
    if dtype.kind == "b" and array.dtype.kind != "b":
        raise BadDataError(what, env, step, f"has dtype {array.dtype}; flags are bools")
    if dtype.kind in "iu" and array.dtype.kind == "f" and not np.array_equal(array, np.trunc(array)):
        raise BadDataError(
            what, env, step, f"holds non-integer values {describe(value)}; the space's dtype is {dtype}"
        )
    if dtype.kind in "iu" and array.size:
        info = np.iinfo(dtype)
        if array.min() < info.min or array.max() > info.max:
            raise BadDataError(what, env, step, f"holds values {describe(value)} that {dtype} cannot hold")
    return array


def check_observation(
    obs: Any, arrays: dict[tuple[str, ...], np.ndarray], dict_obs: bool, *, env: int, step: int
) -> None:
    """Check one env's (possibly Dict) observation against the buffers ``arrays`` it goes to
    (``[N, T, *shape]`` each), as :func:`checked_array` does."""
    for key, array in arrays.items():
        name = "observation" if not dict_obs else f"observation {'.'.join(key)}"
        try:
            value = get_nested(obs, key) if dict_obs else obs
        except (KeyError, TypeError, AttributeError, IndexError):
            raise BadDataError(
                "observation", env, step, f"has no entry {'.'.join(key)}: {describe(obs)}"
            ) from None
        checked_array(value, array.shape[2:], array.dtype, name, env=env, step=step)


def checked_reward(value: Any, *, env: int, step: int) -> float:
    """A reward as a float: a real number or a one-element numeric array, nothing else."""
    if isinstance(value, numbers.Real):
        return float(value)
    array = np.asarray(value) if isinstance(value, np.ndarray) else None
    if array is not None and array.size == 1 and array.dtype.kind in "biuf":
        return float(array.reshape(()))
    raise BadDataError("reward", env, step, f"is {describe(value)}; a reward is a real number")


def checked_flag(value: Any, what: str, *, env: int, step: int) -> bool:
    """``terminated`` / ``truncated`` as a bool: a bool, numpy bool, a one-value bool array (of any
    shape, as rewards may be) or tensor (an env written in torch), or the integers 0 and 1."""
    if isinstance(value, (bool, np.bool_)) or (
        isinstance(value, np.ndarray) and value.size == 1 and value.dtype == np.bool_
    ) or (isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype == torch.bool):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise BadDataError(f"{what} flag", env, step, f"is {describe(value)}; {what} is a bool")


_FLAG_DTYPE, _REWARD_DTYPE = np.dtype(np.bool_), np.dtype(np.float32)


def check_vector_step(
    obs: Any,
    reward: Any,
    terminated: Any,
    truncated: Any,
    arrays: dict[tuple[str, ...], np.ndarray],
    dict_obs: bool,
    *,
    step: int,
) -> None:
    """Check a vector env's batched step (``[N, ...]`` arrays) against the buffers ``arrays`` its
    observations go to, as :func:`checked_array` does; the error names no env (the whole array
    is wrong)."""
    first = next(iter(arrays.values()))
    num_envs, per_env = first.shape[0], (first.shape[0],)
    if (not dict_obs and _fits(obs, (num_envs, *first.shape[2:]), first.dtype)
            and _fits(reward, per_env, _REWARD_DTYPE) and _fits(terminated, per_env, _FLAG_DTYPE)
            and _fits(truncated, per_env, _FLAG_DTYPE)):
        return  # (the test below, without a message made per array)
    for key, array in arrays.items():
        name = "observation" if not dict_obs else f"observation {'.'.join(key)}"
        value = get_nested(obs, key) if dict_obs else obs
        checked_array(
            value, (num_envs, *array.shape[2:]), array.dtype, f"vector env's {name}", env=None, step=step
        )
    checked_array(reward, (num_envs,), _REWARD_DTYPE, "vector env's reward", env=None, step=step)
    checked_array(terminated, (num_envs,), _FLAG_DTYPE, "vector env's terminated", env=None, step=step)
    checked_array(truncated, (num_envs,), _FLAG_DTYPE, "vector env's truncated", env=None, step=step)

