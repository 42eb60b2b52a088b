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

Examples:
    >>> import numpy as np
    >>> checked_array(np.zeros(1), (4,), np.dtype(np.float32), "observation", env=2, step=5)
    Traceback (most recent call last):
    ...
    rlcollect.data.checks.BadDataError: the observation of env 2 at step 5 has shape (1,); the space says (4,)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlcollect.data.layout import Field, OneHotSpace, get_nested

__all__ = [
    "CHECK_LEVELS",
    "BadDataError",
    "BatchValueCheck",
    "FLAG_TYPES",
    "check_observation",
    "check_vector_step",
    "checked_array",
    "checked_flag",
    "checked_reward",
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


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {short_repr(value, 60)}"


def checked_array(
    value: Any, shape: tuple[int, ...], dtype: np.dtype[Any], what: str, *, env: int | None, step: int
) -> np.ndarray:
    """``value`` as an array of exactly ``shape`` whose values ``dtype`` holds, or a
    :class:`BadDataError` (never a broadcast, never a float truncated to an integer)."""
    if (value.__class__ is np.ndarray and value.shape == shape and value.dtype.kind == dtype.kind
            and (dtype.kind not in "iu" or value.dtype.itemsize <= dtype.itemsize)):
        if dtype.kind == "f" and value.dtype.itemsize > dtype.itemsize:
            _check_narrowed(value, dtype, what, env, step)
        return value
    if value is None or isinstance(value, (str, bytes)):
        raise BadDataError(
            what, env, step, f"is {_describe(value)}; the space says an array of shape {shape} {dtype}"
        )
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise BadDataError(
            what, env, step, f"is {_describe(value)} (dtype {array.dtype}); the space says {dtype}"
        )
    if array.shape != shape:
        raise BadDataError(what, env, step, f"has shape {array.shape}; the space says {shape}")
    if dtype.kind == "b" and array.dtype.kind != "b":
        raise BadDataError(what, env, step, f"has dtype {array.dtype}; flags are bools")
    if dtype.kind in "iu" and array.dtype.kind == "f" and not np.array_equal(array, np.trunc(array)):
        raise BadDataError(
            what, env, step, f"holds non-integer values {_describe(value)}; the space's dtype is {dtype}"
        )
    if dtype.kind in "iu" and array.size:
        info = np.iinfo(dtype)
        if array.min() < info.min or array.max() > info.max:
            raise BadDataError(what, env, step, f"holds values {_describe(value)} that {dtype} cannot hold")
    if dtype.kind == "f" and array.dtype.itemsize > dtype.itemsize:
        _check_narrowed(array, dtype, what, env, step)
    return array


def _check_narrowed(array: np.ndarray, dtype: np.dtype[Any], what: str, env: int | None, step: int) -> None:
    """Raise where a finite value of ``array`` (float64) would be stored as inf in ``dtype``
    (float32 holds magnitudes up to about 3.4e38): an inf the env never returned. The sum of
    squares is within the limit for nearly every array (under a microsecond); the exact test
    decides otherwise (an inf or NaN the env did return is the batch check's business)."""
    limit = float(np.finfo(dtype).max)
    if float(np.vdot(array, array)) <= limit:
        return
    if (np.isfinite(array) & (np.abs(array) > limit)).any():
        raise BadDataError(what, env, step, f"holds values {_describe(array)} that {dtype} cannot hold "
                                            "(they would be stored as inf)")


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
                "observation", env, step, f"has no entry {'.'.join(key)}: {_describe(obs)}"
            ) from None
        checked_array(value, array.shape[2:], array.dtype, name, env=env, step=step)


def checked_reward(value: Any, *, env: int, step: int) -> float:
    """A reward as a float: a real number or a one-element numeric array, nothing else."""
    if isinstance(value, numbers.Real):
        return float(value)
    array = np.asarray(value) if isinstance(value, np.ndarray) else None
    if array is not None and array.size == 1 and array.dtype.kind in "biuf":
        return float(array.reshape(()))
    raise BadDataError("reward", env, step, f"is {_describe(value)}; a reward is a real number")


def checked_flag(value: Any, what: str, *, env: int, step: int) -> bool:
    """``terminated`` / ``truncated`` as a bool: a bool, numpy bool, a one-value bool array or
    tensor (an env written in torch), or the integers 0 and 1."""
    if isinstance(value, (bool, np.bool_)) or (
        isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.bool_
    ) or (isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype == torch.bool):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise BadDataError(f"{what} flag", env, step, f"is {_describe(value)}; {what} is a bool")


def _bounds(space: spaces.Space[Any], shape: tuple[int, ...], finite_only: bool) -> tuple[Any, Any] | None:
    """``(low, high)`` arrays to check a field of ``space`` against; ``None`` when nothing can fail."""
    if isinstance(space, spaces.Discrete):
        return np.int64(space.start), np.int64(space.start + space.n - 1)
    if isinstance(space, spaces.MultiDiscrete):
        return space.start, space.start + space.nvec - 1
    if isinstance(space, spaces.MultiBinary):
        return np.zeros(shape, space.dtype), np.ones(shape, space.dtype)
    if isinstance(space, spaces.Box):
        if space.dtype.kind == "f" and finite_only:
            return np.full(shape, -np.inf), np.full(shape, np.inf)
        low, high = np.broadcast_to(space.low, shape), np.broadcast_to(space.high, shape)
        if space.dtype.kind in "iub":
            info = np.iinfo(space.dtype) if space.dtype.kind != "b" else None
            if info is None or (np.all(low <= info.min) and np.all(high >= info.max)):
                return None  # every value of the dtype is in the space
        return low, high
    return None


def _subspace(space: spaces.Space[Any], key: tuple[str, ...]) -> spaces.Space[Any]:
    if not isinstance(space, spaces.Dict):
        return space
    for part in key:
        assert isinstance(space, spaces.Dict)
        space = space.spaces[part]
    return space


class _Range:
    """The bounds of one field: exact ``low``/``high`` arrays and the scalars ``lo``/``hi`` that
    every value lies within when the field is inside (a one-pass test for most batches);
    ``one_hot``: its 0s and 1s hold exactly one 1 along the last axis as well."""

    def __init__(self, low: Any, high: Any, one_hot: bool = False) -> None:
        self.low, self.high, self.one_hot = low, high, one_hot
        self.lo, self.hi = np.max(low).item(), np.min(high).item()


def _range(space: spaces.Space[Any], shape: tuple[int, ...], finite_only: bool) -> _Range | None:
    """The :class:`_Range` of a field of ``space``; ``None`` when nothing can fail."""
    bounds = _bounds(space, shape, finite_only)
    one_hot = isinstance(space, OneHotSpace) and space.dtype.kind != "f"
    if one_hot and bounds is None:  # bools: every value is 0 or 1, the count of 1s still matters
        bounds = np.zeros(shape, space.dtype), np.ones(shape, space.dtype)
    return None if bounds is None else _Range(*bounds, one_hot=one_hot)


def _outside_text(space: spaces.Space[Any]) -> str:
    return f"outside {space}" + (" (exactly one 1 per vector)" if isinstance(space, OneHotSpace) else "")


class BatchValueCheck:
    """Checks a finished batch's values against the spaces, vectorised (one pass per field).

    Actions within discrete ranges and Box actions finite, rewards finite, observations (each
    once: every observation slot, which holds the first, each step's next one and the reset ones,
    and the true finals) within their space's bounds, and what a TensorDict policy writes beside
    the action (``extras``) free of NaN; NaN never passes. A batch that passes costs
    two reductions per field; one that fails names its earliest bad value (an action before what
    its step returned).

    Args:
        observation_space, action_space: the single env's spaces.
        observations, action, extras: the batch layout's fields for them.
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        observations: Sequence[Field],
        action: Field,
        extras: Sequence[Field] = (),
    ) -> None:
        self._obs = [
            (f.key, r, _outside_text(_subspace(observation_space, f.key)),
             "observation" if f.key == ("observation",) else f"observation {'.'.join(f.key)}")
            for f in observations
            if (r := _range(_subspace(observation_space, f.key), f.shape, False)) is not None
        ]
        # a Box action stored as floats (a float Box, or a one-hot as scores) need only be finite
        self._finite_actions = isinstance(action_space, spaces.Box) and (
            action_space.dtype.kind == "f" or action.dtype.is_floating_point)
        self._action = None if self._finite_actions else _range(action_space, action.shape, True)
        self._action_outside = _outside_text(action_space)
        self._extras = [f.key for f in extras if f.dtype.is_floating_point]

    def __call__(self, buffers: Any, steps: int) -> None:
        """Raise :class:`BadDataError` for the earliest value of the batch outside its space: the
        cause, where a NaN observation at one step makes NaN rewards at later ones."""
        if steps:
            found = [*self._bad_actions(buffers, steps), *self._bad_observations(buffers, steps),
                     *self._bad_extras(buffers, steps)]
            reward = buffers.reward_np[:, :steps, 0]
            if not math.isfinite(reward.sum(dtype=np.float64)):
                env, step = _earliest(~np.isfinite(reward))
                found.append(((2 * step + 1, env, 2), BadDataError(
                    "reward", env, step, f"is {reward[env, step]}; a reward is a finite number")))
            if found:
                raise min(found, key=lambda bad: bad[0])[1]

    # each field's earliest bad value, keyed (when, env, field): the action of step t at 2t, what
    # step t returned (its observation, its reward) at 2t + 1, the batch's first observation at -1
    def _bad_actions(self, buffers: Any, steps: int) -> list[tuple[tuple[int, int, int], BadDataError]]:
        actions, bad = buffers.action_np[:, :steps], None
        if self._finite_actions:  # the sum of finite values in float64 is finite, or the
            if not math.isfinite(actions.sum(dtype=np.float64)):  # exact test decides
                bad, outside = ~np.isfinite(actions), "not finite"
        elif self._action is not None and not _inside(actions, self._action):
            bad, outside = _outside(actions, self._action), self._action_outside
        if bad is None:
            return []
        env, step = _earliest(bad)
        return [((2 * step, env, 0), _value_error(actions[env, step], "action", env, step, outside))]

    def _bad_extras(self, buffers: Any, steps: int) -> list[tuple[tuple[int, int, int], BadDataError]]:
        """NaN in what the policy wrote beside the action (``action_log_prob``, a value, a state);
        an inf may be meant (logits of masked actions), a NaN never is."""
        found = []
        for key in self._extras:
            values = buffers.extras[key][:, :steps]
            if math.isnan(values.sum(dtype=torch.float64).item()):  # inf - inf too: exact test
                nan = torch.isnan(values).numpy(force=True)
                if nan.any():
                    env, step = _earliest(nan)
                    value = values[env, step].numpy(force=True)
                    error = BadDataError(f"policy output {'.'.join(key)}", env, step, f"holds NaN: "
                                         f"{_describe(value.tolist() if value.ndim else value.item())}")
                    found.append(((2 * step, env, 0), error))
        return found

    def _bad_observations(self, buffers: Any, steps: int) -> list[tuple[tuple[int, int, int], BadDataError]]:
        found, done = [], buffers.done_np[:, :steps, 0]
        for key, bounds, outside, name in self._obs:
            # every observation slot: the first, each step's next one, or the reset one after a done
            slots = buffers.obs_ext_np[key][:, : steps + 1]
            if not _inside(slots, bounds):
                env, slot = _earliest(_outside(slots, bounds))
                what = name if slot == 0 or not done[env, slot - 1] else f"reset {name}"
                error = _value_error(slots[env, slot], what, env, max(slot - 1, 0), outside)
                found.append(((2 * slot - 1, env, 1), error))
            if done.any():  # and the true final observations of the episodes that ended
                envs, times = np.nonzero(done)
                finals = buffers.next_obs_np[key][envs, times]
                if not _inside(finals, bounds):
                    rows = np.nonzero(_outside(finals, bounds).reshape(len(finals), -1).any(-1))[0]
                    row = rows[np.lexsort((envs[rows], times[rows]))[0]]
                    env, step = int(envs[row]), int(times[row])
                    error = _value_error(finals[row], name, env, step, outside)
                    found.append(((2 * step + 1, env, 1), error))
        return found


def _inside(values: np.ndarray, bounds: _Range) -> bool:
    """Whether every value lies in ``[low, high]`` (NaN never does)."""
    if not values.size:
        return True
    if bounds.one_hot and not (values.sum(-1) == 1).all():
        return False
    if values.min() >= bounds.lo and values.max() <= bounds.hi:  # the min is NaN if any value is
        return True  # one pass over the values, no temporaries, for most spaces and batches
    return bool(((values >= bounds.low) & (values <= bounds.high)).all())


def _outside(values: np.ndarray, bounds: _Range) -> np.ndarray:
    """Where ``values`` lie outside ``[low, high]`` (NaN does), or, for a one-hot field, in a
    vector without exactly one 1."""
    outside = ~((values >= bounds.low) & (values <= bounds.high))
    if bounds.one_hot:
        outside |= (values.sum(-1) != 1)[..., None]
    return outside  # type: ignore[no-any-return]


def _earliest(bad: np.ndarray) -> tuple[int, int]:
    """``(env, index)`` of the earliest ``[env, index, ...]`` frame holding a ``bad`` value (the
    lowest index, then the lowest env); ``bad`` holds one."""
    frame = bad.reshape(*bad.shape[:2], -1).any(-1)
    index, env = np.argwhere(frame.T)[0].tolist()
    return env, index


def _value_error(value: np.ndarray, what: str, env: int, step: int, outside: str) -> BadDataError:
    return BadDataError(
        what, env, step, f"is {_describe(value.tolist() if value.ndim else value.item())}, {outside}"
    )


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
    num_envs = next(iter(arrays.values())).shape[0]
    for key, array in arrays.items():
        name = "observation" if not dict_obs else f"observation {'.'.join(key)}"
        value = get_nested(obs, key) if dict_obs else obs
        checked_array(
            value, (num_envs, *array.shape[2:]), array.dtype, f"vector env's {name}", env=None, step=step
        )
    checked_array(reward, (num_envs,), _REWARD_DTYPE, "vector env's reward", env=None, step=step)
    checked_array(terminated, (num_envs,), _FLAG_DTYPE, "vector env's terminated", env=None, step=step)
    checked_array(truncated, (num_envs,), _FLAG_DTYPE, "vector env's truncated", env=None, step=step)
