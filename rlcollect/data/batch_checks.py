"""The per-batch check of a batch's values against the spaces, vectorised: NaN anywhere,
observations infinite or outside their bounds, discrete and one-hot actions out of range,
non-finite rewards and Box actions (see :mod:`rlcollect.data.checks` for the checks of each
write).

Examples:
    >>> from gymnasium import spaces
    >>> from rlcollect.data.buffers import BatchBuffers
    >>> from rlcollect.data.layout import BatchLayout, action_fields, observation_fields
    >>> obs_space, action_space = spaces.Box(0, 1, (2,)), spaces.Discrete(3)
    >>> layout = BatchLayout(tuple(observation_fields(obs_space)), action_fields(action_space)[0])
    >>> buffers = BatchBuffers.allocate(layout, num_envs=2, num_steps=4)
    >>> check = BatchValueCheck(obs_space, action_space, layout.observations, layout.action)
    >>> buffers.action_np[1, 2] = 5
    >>> check(buffers, 4)
    Traceback (most recent call last):
    ...
    rlcollect.data.checks.BadDataError: the action of env 1 at step 2 is int 5, outside Discrete(3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlcollect.data.checks import BadDataError, describe, short_repr
from rlcollect.data.layout import Field, OneHotSpace
from rlcollect.data.trajectories import frames_where

__all__ = ["BatchValueCheck"]


def _bounds(space: spaces.Space[Any], shape: tuple[int, ...]) -> tuple[Any, Any] | None:
    """``(low, high)`` arrays to check a field of ``space`` against (a float Box's clipped to
    finite values); ``None`` when nothing can fail."""
    if isinstance(space, spaces.Discrete):
        return np.int64(space.start), np.int64(space.start + space.n - 1)
    if isinstance(space, spaces.MultiDiscrete):
        return space.start, space.start + space.nvec - 1
    if isinstance(space, spaces.MultiBinary):
        return np.zeros(shape, space.dtype), np.ones(shape, space.dtype)
    if isinstance(space, spaces.Box):
        low, high = np.broadcast_to(space.low, shape), np.broadcast_to(space.high, shape)
        if space.dtype.kind == "f":  # an observation is finite, where the Box is unbounded too
            biggest = np.finfo(space.dtype).max
            return np.maximum(low, -biggest), np.minimum(high, biggest)
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
    ``one_hot``: its 0s and 1s hold exactly one 1 along the last axis as well; ``columns``: the
    bounds of each element of a small field whose elements have bounds of their own (a field's
    values then pass one column at a time where the scalars fail: CartPole's position and angle)."""

    def __init__(self, low: Any, high: Any, one_hot: bool = False) -> None:
        self.low, self.high, self.one_hot = low, high, one_hot
        self.lo, self.hi = np.max(low).item(), np.min(high).item()
        self.lowest, self.highest = np.min(low).item(), np.max(high).item()
        size = np.size(low)
        self.columns = (list(zip(np.ravel(low).tolist(), np.ravel(high).tolist(), strict=True))
                        if 1 < size <= 16 and np.shape(low) == np.shape(high) else None)


def _range(space: spaces.Space[Any], shape: tuple[int, ...]) -> _Range | None:
    """The :class:`_Range` of a field of ``space``; ``None`` when nothing can fail."""
    bounds = _bounds(space, shape)
    one_hot = isinstance(space, OneHotSpace) and space.dtype.kind != "f"
    if one_hot and bounds is None:  # bools: every value is 0 or 1, the count of 1s still matters
        bounds = np.zeros(shape, space.dtype), np.ones(shape, space.dtype)
    return None if bounds is None else _Range(*bounds, one_hot=one_hot)


def _outside_text(space: spaces.Space[Any]) -> str:
    if isinstance(space, OneHotSpace):
        return f"outside {space} (exactly one 1 per vector)"
    return f"outside {space}"


class BatchValueCheck:
    """Checks a finished batch's values against the spaces, vectorised (one pass per field).

    Actions within discrete ranges and Box actions finite, rewards finite, observations (each
    once: every observation slot, which holds the first, each step's next one and the reset ones,
    and the true finals) finite and within their space's bounds, and what a TensorDict policy
    writes beside the action (``extras``) free of NaN; NaN never passes. A batch that passes
    costs two reductions per field; one that fails names its earliest bad value (an action
    before what its step returned).

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
            if (r := _range(_subspace(observation_space, f.key), f.shape)) is not None
        ]
        # a Box action stored as floats (a float Box, or a one-hot as scores) need only be finite
        self._finite_actions = isinstance(action_space, spaces.Box) and (
            action_space.dtype.kind == "f" or action.dtype.is_floating_point)
        self._action = None if self._finite_actions else _range(action_space, action.shape)
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
                value, why = reward[env, step], ""
                if np.isinf(value):  # the env's own inf, or a float64 beyond float32's range
                    why = (f" (rewards are stored as {reward.dtype}, which holds magnitudes up to "
                           f"{np.finfo(reward.dtype).max:.1e}: a float64 beyond that is stored as inf)")
                found.append(((2 * step + 1, env, 2), BadDataError(
                    "reward", env, step, f"is {value}; a reward is a finite number{why}")))
            if found:
                raise min(found, key=lambda bad: bad[0])[1]

    def blame_action(self, buffers: Any, step: int, error: Exception) -> None:
        """The envs' step ``step`` raised ``error``: raise :class:`BadDataError` from it instead where
        an action of the batch up to that step is outside the action space (the env's own error
        about it, an ``AssertionError`` or an ``IndexError``, names neither the policy nor the step)."""
        found = self._bad_actions(buffers, step + 1)
        if found:
            raise found[0][1] from error

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
                                         f"{_shown(value)}")
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
                envs, times = frames_where(done)
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
    least, most = values.min(), values.max()  # NaN if any value is
    if least >= bounds.lo and most <= bounds.hi:
        return True  # one pass over the values, no temporaries, for most spaces and batches
    shape = np.shape(bounds.low)
    if bounds.columns is not None and values.shape[values.ndim - len(shape):] == shape:
        if not (least >= bounds.lowest and most <= bounds.highest):
            return False  # below every lower bound, above every upper one, or NaN
        # a strided pass per bound tighter than the values' extremes (CartPole's angle), not the
        # eight of all four elements', nor the test below (a tenth of its time)
        flat = values.reshape(-1, len(bounds.columns))
        return not any((lo > least and flat[:, i].min() < lo) or (hi < most and flat[:, i].max() > hi)
                       for i, (lo, hi) in enumerate(bounds.columns))
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
    if value.dtype.kind == "f" and not np.isfinite(value).all():  # NaN or inf: whatever the bounds
        outside = "not finite"
        if np.isinf(value).any() and value.dtype.itemsize < 8:
            outside += (f" ({value.dtype} holds magnitudes up to {np.finfo(value.dtype).max:.1e}: a "
                        "float64 beyond that is stored as inf)")
    return BadDataError(
        what, env, step, f"is {_shown(value)}, {outside}"
    )


def _shown(value: np.ndarray) -> str:
    """A stored value for a message: an array as its values (``[nan, 2.0]``: the batch's dtype, not
    the type the env or policy returned it in), a scalar with its type (``float nan``)."""
    return short_repr(value.tolist(), 60) if value.ndim else describe(value.item())
