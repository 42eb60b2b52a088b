"""What every policy adapter is and shares: :class:`PolicyAdapter` (act at step ``t``, writing the
action in place), the random policy, and the checks of what a policy returns.

Examples:
    >>> interaction_type("mode").value
    'mode'
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from tensordict.nn import InteractionType

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.checks import BadDataError
from rlcollect.data.layout import Field, OneHotSpace, action_fields, observation_fields

__all__ = [
    "Carried",
    "EpisodeStarts",
    "NestedKey",
    "PolicyAdapter",
    "PrivateInput",
    "check_action",
    "checked_output",
    "interaction_type",
    "lacks_unit_dims",
    "on_device",
    "sample_observations",
]

NestedKey = tuple[str, ...]


_EXPLORATION = {t.value: t for t in InteractionType}


def interaction_type(value: str | InteractionType | Any) -> InteractionType:
    """Parse ``exploration_type``: an ``InteractionType`` / TorchRL ``ExplorationType`` or name.

    Raises:
        ValueError: for anything else, listing the allowed names.
    """
    if isinstance(value, InteractionType):
        return value
    name = getattr(value, "value", value)
    if isinstance(name, str) and name.lower() in _EXPLORATION:
        return _EXPLORATION[name.lower()]
    raise ValueError(f"exploration_type={value!r} is not one of {sorted(_EXPLORATION)}")


def checked_output(out: Any, shape: tuple[int, ...], dtype: torch.dtype, what: str, step: int | None) -> Any:
    """``out`` if it can be written into a ``shape`` ``dtype`` buffer without a broadcast, a
    float truncated to an integer or an integer wrapped around (reshaped where it only lacks
    trailing dimensions of size 1: a policy's ``[N]`` actions for a space of shape ``(1,)``, as
    TorchRL takes them); else a :class:`BadDataError` (the per-step check of policies)."""
    if not isinstance(out, torch.Tensor):
        raise BadDataError(what, None, step, f"is a {type(out).__name__}; the policy must return a tensor "
                           f"of shape {list(shape)} ({dtype})")
    if lacks_unit_dims(tuple(out.shape), tuple(shape)):
        out = out.reshape(shape)
    if tuple(out.shape) != tuple(shape):
        raise BadDataError(what, None, step, f"has shape {list(out.shape)}; expected {list(shape)} "
                           "(one per env, never broadcast)")
    if out.is_floating_point() and not dtype.is_floating_point and not _whole(out):
        raise BadDataError(what, None, step, f"has dtype {out.dtype} with non-integer values; the space's "
                           f"actions are {dtype} (a float such as 1.7 would be stored truncated): return "
                           "integers (floats holding whole numbers are stored exactly)")
    if dtype.is_floating_point or dtype == torch.bool or out.dtype in (dtype, torch.bool) or not out.numel():
        return out
    (low, high), info = (bound.item() for bound in torch.aminmax(out)), torch.iinfo(dtype)
    if low < info.min or high > info.max:
        value = low if low < info.min else high
        raise BadDataError(what, None, step, f"holds {value:g} ({out.dtype}); it is stored as {dtype}, "
                           f"which holds [{info.min}, {info.max}]: {value:g} would become "
                           f"{torch.tensor(value).to(dtype).item()}")
    return out


def lacks_unit_dims(got: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """Whether ``got`` is ``expected`` without some of its trailing dimensions of size 1.

    Examples:
        >>> lacks_unit_dims((4,), (4, 1)), lacks_unit_dims((4,), (4, 2)), lacks_unit_dims((4, 1), (4, 1))
        (True, False, False)
    """
    extra = len(expected) - len(got)
    return extra > 0 and expected[: len(got)] == got and all(size == 1 for size in expected[len(got):])


def _whole(values: torch.Tensor) -> bool:
    """Whether floating ``values`` are all finite whole numbers (stored exactly as integers)."""
    return bool(torch.isfinite(values).all()) and torch.equal(values, torch.trunc(values))


@dataclass(frozen=True)
class Carried:
    """One entry of state a policy carries from each step to the next, per env.

    The policy writes ``written`` at step ``t`` and reads it back as ``read`` at step ``t + 1``:
    ``read == written`` for state kept under one key (``"h"`` in and out), ``written == ("next",
    *read)`` for TorchRL's recurrent modules (``LSTMModule`` reads ``recurrent_state_h`` and writes
    ``("next", "recurrent_state_h")``). ``resets``: the state is zeros at the first step of each
    episode (state a policy reading ``is_init`` lists in its ``in_keys``, as TorchRL's
    ``TensorDictPrimer`` resets it); other state (an exploration module's ``_``-prefixed noise,
    a policy that does not read ``is_init``) is kept across episode ends, as in TorchRL without a
    primer. ``stored``: the batch also holds ``read`` at each
    step (the state the step started from, what a learner replays sequences from), besides
    ``written`` (``read == written`` stores the written value under the one key).
    """

    read: tuple[str, ...]
    written: tuple[str, ...]
    resets: bool

    @property
    def stored(self) -> bool:
        """Whether ``read`` is a field of its own in the batch."""
        return self.read != self.written


class EpisodeStarts:
    """A batch's ``is_init`` as its steps go, for the envs ``env`` (an index or ``slice(None)``):
    :meth:`at` ``t`` writes where step ``t - 1`` ended an episode (or was an env's own reset step,
    masked out: ``layout.masked``) and returns the view (step 0's is written before the batch,
    from the batch before's last step)."""

    def __init__(self, buffers: BatchBuffers, env: int | slice) -> None:
        assert buffers.is_init is not None
        self._views = [buffers.is_init[env, t] for t in range(buffers.num_steps)]
        mask = buffers.mask if buffers.layout.masked else None
        self._flags = [None] + [(buffers.terminated[env, t - 1], buffers.truncated[env, t - 1],
                                 None if mask is None else mask[env, t - 1, None])
                                for t in range(1, buffers.num_steps)]

    def at(self, t: int) -> torch.Tensor:
        """``is_init`` of step ``t`` (a view into the buffers)."""
        flags = self._flags[t]
        if flags is not None:
            terminated, truncated, real = flags
            torch.logical_or(terminated, truncated, out=self._views[t])
            if real is not None:
                self._views[t] |= ~real
        return self._views[t]


class PolicyAdapter(abc.ABC):
    """Chooses the actions of all envs of a batch at step ``t``, in place in the buffers."""

    #: What the policy writes besides the action (TensorDict policies only), then the state it
    #: reads (:attr:`Carried.stored`), which the adapter writes.
    extras: tuple[Field, ...] = ()
    #: The module that runs (the device copy where there is one), for weight updates.
    module: torch.nn.Module | None = None
    #: The state the policy carries from step to step (TensorDict policies only), and the values
    #: the step before a batch's first wrote, per env, keyed by :attr:`Carried.written`.
    carried: tuple[Carried, ...] = ()
    carry: dict[tuple[str, ...], torch.Tensor] = {}  # noqa: RUF012 (never written: subclasses set their own)
    #: The policy reads ``is_init`` (``[N, 1]`` bool: the envs whose observation starts an episode),
    #: which the batch then holds; only such a policy's state :attr:`~Carried.resets`.
    reads_is_init: bool = False
    #: Groups of envs a policy server serves apart (its worker side): the rollout loop then steps
    #: one group while the server acts for another (:func:`~rlcollect.rollout.loop.step_in_groups`).
    groups: int = 1
    #: Check every output before writing it (``check="full"``; see ``rlcollect.data.checks``).
    check_writes: bool = True
    #: The dtype of the action the policy returned on its dry step (``None``: random actions).
    action_dtype: torch.dtype | None = None
    #: The action as the batch stores it (the rollout sets it from its layout; the server's
    #: :meth:`outputs` checks against it).
    action_field: Field

    def state_inputs(self, previous: Mapping[NestedKey, torch.Tensor], is_init: torch.Tensor | None
                     ) -> dict[NestedKey, torch.Tensor]:
        """What the policy reads of its state, from what it wrote at each env's previous step
        (``previous``, keyed by :attr:`Carried.written`): zeros where ``is_init`` (``[N, 1]``) for
        the state that :attr:`~Carried.resets` (new tensors there, the same ones elsewhere)."""
        inputs = {}
        for c in self.carried:
            value = previous[c.written]
            if c.resets and is_init is not None:
                starts = is_init.reshape(is_init.shape[0], *([1] * (value.dim() - 1)))
                value = torch.where(starts, torch.zeros((), dtype=value.dtype), value)
            inputs[c.read] = value
        return inputs

    def bind(self, buffers: BatchBuffers) -> None:
        """Point the adapter at ``buffers``; views are made once per buffers and reused.

        A worker alternating between shared-memory slots re-binds every batch, so the per-step
        views are cached rather than rebuilt.
        """
        cache: dict[int, tuple[BatchBuffers, dict[str, Any]]] = self.__dict__.setdefault("_bindings", {})
        if id(buffers) not in cache:
            cache[id(buffers)] = (buffers, self._views(buffers))
        self.__dict__.update(cache[id(buffers)][1])

    @abc.abstractmethod
    def _views(self, buffers: BatchBuffers) -> dict[str, Any]:
        """The attributes :meth:`act` reads for ``buffers`` (views into it, made once)."""

    @abc.abstractmethod
    def act(self, t: int) -> None:
        """Write ``action[:, t]`` (and extras) from observation slot ``t``."""

    def finish(self, steps: int) -> None:
        """Check what :meth:`act` left to check, once per batch after its last step (``steps``
        taken), before the batch leaves the engine; adapters that check as they act keep this."""
        return None

    def outputs(self, obs: Mapping[NestedKey, torch.Tensor]) -> list[torch.Tensor]:
        """The action, then each of :attr:`extras`, for observations of any number of envs
        (a policy server's gathered batch); the rollout loop uses :meth:`act` instead."""
        raise NotImplementedError(f"{type(self).__name__} does not serve gathered observations")


def sample_observations(space: gym.Space[Any], num_envs: int) -> dict[tuple[str, ...], torch.Tensor]:
    batched = batch_space(space, num_envs)
    batched.seed(0)
    sample = batched.sample()
    out = {}
    for field in observation_fields(space):
        value = sample
        if isinstance(space, gym.spaces.Dict):
            for part in field.key:
                value = value[part]
        out[field.key] = torch.as_tensor(np.asarray(value)).to(field.dtype)
    return out


def check_action(output: Any, space: gym.Space[Any], num_envs: int) -> None:
    field = action_fields(space)[0]
    expected_shape = (num_envs, *field.shape)
    # a float one-hot action is TorchRL's logits or scores: the env steps with its argmax
    wants_float = isinstance(space, OneHotSpace) or (
        isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating))
    # integers fit a floating Box exactly, whole-number floats an integer space (as in TorchRL)
    expected = ("a floating (or integer) dtype" if wants_float
                else "an integer or bool dtype (or floats holding whole numbers)")
    if not isinstance(output, torch.Tensor):
        several = ("; a policy with several outputs (the action, its log-probability, ...) is a "
                   "tensordict.nn.TensorDictModule(policy, in_keys=['observation'], out_keys=['action', "
                   "'action_log_prob', ...]): its other outputs are stored in the batch"
                   if isinstance(output, tuple | dict) else "")
        raise ValueError(
            f"the policy returned {type(output).__name__}; expected a tensor (or a numpy array) of shape "
            f"{expected_shape} with {expected} for action space {space}{several}"
        )
    if output.layout != torch.strided:
        raise ValueError(f"the policy's action is a {output.layout} tensor; the batch stores dense ones: "
                         "return output.to_dense()")
    if lacks_unit_dims(tuple(output.shape), expected_shape):  # stored reshaped (see checked_output)
        output = output.reshape(expected_shape)
    if tuple(output.shape) != expected_shape or (
            output.is_floating_point() and not wants_float and not _whole(output)):
        raise ValueError(
            f"the policy's action does not fit action space {space}: got shape "
            f"{tuple(output.shape)} dtype {output.dtype}, expected shape {expected_shape} "
            f"with {expected}{_misfit_hint(output, space, expected_shape)}"
        )
    if output.device.type == "meta":
        raise ValueError(
            "the policy's action is on the meta device (a tensor without data): the policy must return "
            "actions with values, on the CPU or the policy's device (was it built on the meta device?)"
        )


def _misfit_hint(output: torch.Tensor, space: gym.Space[Any], expected: tuple[int, ...]) -> str:
    """What the usual mistakes behind a misfit action look like, said after the shapes."""
    got = tuple(output.shape)
    if (isinstance(space, gym.spaces.Discrete) and output.is_floating_point()
            and got == (*expected, int(space.n))):
        return (f": {int(space.n)} floats per env look like logits or probabilities over the actions; "
                "return the chosen ones, e.g. logits.argmax(-1) or "
                "torch.distributions.Categorical(logits=logits).sample()")
    if isinstance(space, OneHotSpace) and got == expected[:-1] and not output.is_floating_point():
        return (": one action index per env for a one-hot action; return "
                f"torch.nn.functional.one_hot(action, {expected[-1]}), or build a TorchRL GymEnv with "
                "categorical_action_encoding=True to step it with indices")
    if got == (*expected, 1):
        return ": drop the trailing dimension of size 1 (.squeeze(-1))"
    if got == expected[1:] and expected[:1] != (1,):
        return (f": one action for {expected[0]} envs; the policy gets the observations of every env "
                f"at once ([{expected[0]}, *obs]) and returns one action per env")
    return ""


def on_device(module: Any, device: torch.device | None) -> Any:
    """``module`` itself if it already lives on ``device``, else a copy moved there (once)."""
    if device is None or not isinstance(module, torch.nn.Module):
        return module
    tensors = list(module.parameters()) + list(module.buffers())
    if all(t.device == device for t in tensors):
        return module
    return copy.deepcopy(module).to(device)


#: Layers that read their input and return a new tensor, neither writing into it nor keeping it
#: (under inference mode nothing is saved for a backward pass).
READ_ONLY_LAYERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.LayerNorm)


def reads_input_only(policy: Any) -> bool:
    """Whether ``policy`` can neither write into its input nor keep it: a module (or an
    ``nn.Sequential`` whose first module is one) of exactly one of :data:`READ_ONLY_LAYERS`, its own
    ``forward``, no forward hook on it, on the ``Sequential`` around it or on every module. Such a
    policy may be handed the batch's own view of the observations, with no copy.

    Examples:
        >>> reads_input_only(torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU()))
        True
        >>> reads_input_only(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2)))  # a view
        False
    """
    hooks = torch.nn.modules.module
    if hooks._global_forward_pre_hooks or hooks._global_forward_hooks:
        return False
    while type(policy) is torch.nn.Sequential and len(policy) and not _hooked(policy):
        policy = policy[0]
    return type(policy) in READ_ONLY_LAYERS and not _hooked(policy)


def _hooked(module: torch.nn.Module) -> bool:
    return bool(module._forward_pre_hooks or module._forward_hooks or "forward" in vars(module))


class PrivateInput:
    """The policy's own copy of one observation entry at each step, made from the batch's view of
    step ``t``: a policy that writes into its input changes its copy, never the stored frames, and
    one that keeps its inputs (a frame history, the previous observation) finds them as they were,
    as in a hand-written loop. The copy goes through numpy where it can (under a microsecond for
    small entries); ``scratch`` is a tensor of the entry's shape and dtype."""

    def __init__(self, views: list[torch.Tensor]) -> None:
        self.views = views
        self.scratch = torch.empty_like(views[0], memory_format=torch.contiguous_format)
        self._views_np: list[np.ndarray] = []
        try:
            self._views_np = [view.numpy() for view in views]
        except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16), or not on the CPU
            self._views_np = []

    def take(self, t: int) -> torch.Tensor:
        """A new tensor holding step ``t``'s observation."""
        if self._views_np:
            return torch.from_numpy(self._views_np[t].copy())
        return self.views[t].clone(memory_format=torch.contiguous_format)
