"""Policy adapters: read observation slot ``t`` of the buffers, write ``action[:, t]`` (+ extras).

Three kinds, picked once by :func:`make_policy`:

- :class:`RandomPolicy` (``policy=None``): uniform actions from the action space, seeded.
- :class:`ModulePolicy`: an ``nn.Module`` or callable from observations ``[N, *obs]`` to actions
  ``[N, *act]``.
- :class:`TensorDictPolicy`: a ``TensorDictModule`` (or any callable with ``in_keys`` /
  ``out_keys``) reading its in_keys and writing ``action`` plus extras (``action_log_prob``, ...).

Each is checked once by a dry step on observations sampled from the space, so a policy whose
output does not fit the action space fails at construction, not mid-run.

Examples:
    >>> import torch, gymnasium as gym
    >>> obs_space, act_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    >>> policy = make_policy(lambda obs: obs.sum(-1).gt(0).long(), obs_space, act_space,
    ...                      num_envs=3)
    >>> type(policy).__name__, policy.extras
    ('ModulePolicy', ())
"""

from __future__ import annotations

import abc
import copy
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, TensorDictModule, TensorDictModuleBase, set_interaction_type

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.checks import BadDataError
from rlcollect.data.layout import Field, action_fields, is_private_key, observation_fields

__all__ = [
    "ModulePolicy",
    "PolicyAdapter",
    "RandomPolicy",
    "TensorDictPolicy",
    "checked_output",
    "interaction_type",
    "make_policy",
]

_EXPLORATION = {t.value: t for t in InteractionType}
NestedKey = tuple[str, ...]


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
    """``out`` if it can be written into a ``shape`` ``dtype`` buffer without a broadcast or a
    float truncated to an integer; else a :class:`BadDataError` (the per-step check of policies)."""
    if not isinstance(out, torch.Tensor):
        raise BadDataError(what, None, step, f"is a {type(out).__name__}; the policy must return a tensor "
                           f"of shape {list(shape)} ({dtype})")
    if tuple(out.shape) != tuple(shape):
        raise BadDataError(what, None, step, f"has shape {list(out.shape)}; expected {list(shape)} "
                           "(one per env, never broadcast)")
    if out.is_floating_point() and not dtype.is_floating_point and not _whole(out):
        raise BadDataError(what, None, step, f"has dtype {out.dtype} with non-integer values; the space's "
                           f"actions are {dtype} (a float such as 1.7 would be stored truncated): return "
                           "integers (floats holding whole numbers are stored exactly)")
    return out


def _whole(values: torch.Tensor) -> bool:
    """Whether floating ``values`` are all finite whole numbers (stored exactly as integers)."""
    return bool(torch.isfinite(values).all()) and torch.equal(values, torch.trunc(values))


class PolicyAdapter(abc.ABC):
    """Chooses the actions of all envs of a batch at step ``t``, in place in the buffers."""

    #: What the policy writes besides the action (TensorDict policies only).
    extras: tuple[Field, ...] = ()
    #: The module that runs (the device copy where there is one), for weight updates.
    module: torch.nn.Module | None = None
    #: Extras the policy reads back at the next step (its carried state), and their values for
    #: the step before a batch's first, per env (TensorDict policies only).
    carried: tuple[tuple[str, ...], ...] = ()
    carry: dict[tuple[str, ...], torch.Tensor] = {}  # noqa: RUF012 (never written: subclasses set their own)
    #: Check every output before writing it (``check="full"``; see ``rlcollect.data.checks``).
    check_writes: bool = True
    #: The dtype of the action the policy returned on its dry step (``None``: random actions).
    action_dtype: torch.dtype | None = None

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


class RandomPolicy(PolicyAdapter):
    """Uniform random actions for ``num_envs`` envs from ``action_space``, seeded by :meth:`seed`.

    Examples:
        >>> import gymnasium as gym
        >>> policy = RandomPolicy(gym.spaces.Discrete(3), num_envs=2, seed=0)
        >>> policy.sample().shape
        (2,)
    """

    _action_np: np.ndarray  # [N, T, *act], set by bind()

    def __init__(self, action_space: gym.Space[Any], num_envs: int, seed: int | None = None) -> None:
        self.space = batch_space(action_space, num_envs)
        self.space.seed(seed)

    def seed(self, seed: int | None) -> None:
        """Reseed the generator the actions come from."""
        self.space.seed(seed)

    def sample(self) -> Any:
        """Actions for all envs, ``[N, *act]``."""
        return self.space.sample()

    def _views(self, buffers: BatchBuffers) -> dict[str, Any]:
        return {"_action_np": buffers.action_np}

    def act(self, t: int) -> None:
        self._action_np[:, t] = self.space.sample()

    def state_dict(self) -> dict[str, Any]:
        """The generator's state."""
        return dict(copy.deepcopy(self.space.np_random.bit_generator.state))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the generator's state."""
        self.space.np_random.bit_generator.state = copy.deepcopy(dict(state))


def _sample_observations(space: gym.Space[Any], num_envs: int) -> dict[tuple[str, ...], torch.Tensor]:
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


def _check_action(output: Any, space: gym.Space[Any], num_envs: int) -> None:
    field = action_fields(space)[0]
    expected_shape = (num_envs, *field.shape)
    wants_float = isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating)
    # integers fit a floating Box exactly, whole-number floats an integer space (as in TorchRL)
    expected = ("a floating (or integer) dtype" if wants_float
                else "an integer or bool dtype (or floats holding whole numbers)")
    if not isinstance(output, torch.Tensor):
        raise ValueError(
            f"the policy returned {type(output).__name__}; expected a tensor of shape "
            f"{expected_shape} with {expected} for action space {space}"
        )
    if tuple(output.shape) != expected_shape or (
            output.is_floating_point() and not wants_float and not _whole(output)):
        raise ValueError(
            f"the policy's action does not fit action space {space}: got shape "
            f"{tuple(output.shape)} dtype {output.dtype}, expected shape {expected_shape} "
            f"with {expected}"
        )
    if output.device.type == "meta":
        raise ValueError(
            "the policy's action is on the meta device (a tensor without data): the policy must return "
            "actions with values, on the CPU or the policy's device (was it built on the meta device?)"
        )


def _on_device(module: Any, device: torch.device | None) -> Any:
    """``module`` itself if it already lives on ``device``, else a copy moved there (once)."""
    if device is None or not isinstance(module, torch.nn.Module):
        return module
    tensors = list(module.parameters()) + list(module.buffers())
    if all(t.device == device for t in tensors):
        return module
    return copy.deepcopy(module).to(device)


class _PrivateInput:
    """The policy's own copy of one observation entry, refilled each step from the batch's view
    of step ``t``: a policy that writes into its input changes its copy, never the stored frames.
    The copy goes through numpy where it can (a fraction of a microsecond for small entries)."""

    def __init__(self, views: list[torch.Tensor]) -> None:
        self.views = views
        self.scratch = torch.empty_like(views[0], memory_format=torch.contiguous_format)
        self._scratch_np: np.ndarray | None = None
        self._views_np: list[np.ndarray] = []
        try:
            self._views_np = [view.numpy() for view in views]
            self._scratch_np = self.scratch.numpy()
        except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16), or not on the CPU
            self._views_np = []

    def take(self, t: int) -> torch.Tensor:
        """The scratch tensor, holding step ``t``'s observation."""
        if self._scratch_np is not None:
            np.copyto(self._scratch_np, self._views_np[t])
        else:
            self.scratch.copy_(self.views[t])
        return self.scratch


class ModulePolicy(PolicyAdapter):
    """A module or callable mapping observations ``[N, *obs]`` to actions ``[N, *act]``.

    Args:
        module: the policy; copied once to ``device`` if its parameters live elsewhere (the
            user's module is never moved).
        observation_space, action_space: the single env's spaces (checked by a dry step).
        num_envs: envs stepped together.
        device: where the policy runs; ``None`` for where it already is.
    """

    # set by bind(): per-step views of observation slot t and action[:, t], the action's shape and dtype
    _obs_views: list[torch.Tensor]
    _input: _PrivateInput  # the policy's own copy of slot t
    _action_views: list[torch.Tensor]
    _action_shape: torch.Size
    _action_dtype: torch.dtype
    _outputs: list[Any]  # each step's output, checked by finish()

    def __init__(
        self,
        module: Callable[[torch.Tensor], torch.Tensor],
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        num_envs: int,
        device: torch.device | None = None,
    ) -> None:
        if isinstance(observation_space, gym.spaces.Dict):
            raise TypeError(
                f"policy {type(module).__name__} takes a tensor, but observation space "
                f"{observation_space} is a Dict: use a tensordict.nn.TensorDictModule policy "
                "whose in_keys name the observation entries"
            )
        self.callable = _on_device(module, device)
        self.module = self.callable if isinstance(self.callable, torch.nn.Module) else None
        self.device = device
        self._moves_obs = device is not None and device.type != "cpu"  # buffers live on the CPU
        sample = next(iter(_sample_observations(observation_space, num_envs).values()))
        self._action_field = action_fields(action_space)[0]
        with torch.inference_mode():
            out = self._forward(sample)
            arguments = _required_arguments(module)
            if isinstance(out, tuple) and arguments is not None and arguments[1] == ["observation"]:
                raise _TupleOutput(len(out))  # make_policy wraps it as TorchRL does
            _check_action(out, action_space, num_envs)
        self.action_dtype = out.dtype

    def _forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self._moves_obs:
            obs = obs.to(self.device, non_blocking=True)
        return self.callable(obs)

    def _views(self, buffers: BatchBuffers) -> dict[str, Any]:
        obs = next(iter(buffers.obs_ext.values()))
        # one view per step, made once: indexing a tensor costs more than the copy itself
        views = [obs[:, t] for t in range(buffers.num_steps)]
        return {
            "_obs_views": views,
            "_input": _PrivateInput(views),
            "_action_views": [buffers.action[:, t] for t in range(buffers.num_steps)],
            "_action_shape": buffers.action[:, 0].shape,
            "_action_dtype": buffers.action.dtype,
            "_outputs": [None] * buffers.num_steps,
        }

    def act(self, t: int) -> None:
        if self._moves_obs:  # a copy on the policy's device
            obs = self._obs_views[t].to(self.device, non_blocking=True)
        else:  # a copy all the same: what the policy does to it never reaches the batch
            obs = self._input.take(t)
        out = self.callable(obs)
        self._outputs[t] = out  # checked by finish(), in one loop: cheaper than between env steps
        try:
            self._action_views[t].copy_(out)
        except (TypeError, RuntimeError):  # not a tensor, or a shape torch cannot write: name it
            checked_output(out, self._action_shape, self._action_dtype, "action", t)
            raise

    def finish(self, steps: int) -> None:
        outputs, shape, dtype = self._outputs, self._action_shape, self._action_dtype
        if self.check_writes:
            for t in range(steps):
                out = outputs[t]
                if out.__class__ is not torch.Tensor or out.shape != shape or out.dtype is not dtype:
                    checked_output(out, shape, dtype, "action", t)
        outputs[:steps] = [None] * steps  # nothing kept past the batch

    def outputs(self, obs: Mapping[NestedKey, torch.Tensor]) -> list[torch.Tensor]:
        first = next(iter(obs.values()))
        out = self._forward(first)
        if self.check_writes:
            field = self._action_field
            checked_output(out, (first.shape[0], *field.shape), field.dtype, "action", None)
        return [out]


def _leaf_keys(td: TensorDictBase) -> list[tuple[str, ...]]:
    return [(k,) if isinstance(k, str) else tuple(k) for k in td.keys(True, True)]


class TensorDictPolicy(PolicyAdapter):
    """A TensorDict policy, called the TorchRL way: on a TensorDict of the step's observations,
    reading its ``in_keys`` and writing ``action`` and any extras into it (or into the TensorDict
    it returns).

    Extras are found by the dry step: every leaf the policy writes besides ``action`` and the
    observation keys gets its own buffer and lands in the batch. The TensorDicts the policy is
    called on are views of the batch buffers, built once per buffers and step, never per step.

    State the policy carries from step to step (an extra it lists in its ``in_keys``, or a private
    one, ``_``-prefixed, such as TorchRL's Ornstein-Uhlenbeck noise ``_ou_prev_noise``): step ``t``
    reads what step ``t - 1`` wrote, as TorchRL's collectors carry the root keys from one step to
    the next (zeros before the first step; kept across episode ends, which such modules see
    through ``is_init``).

    Args:
        module: the policy: a ``TensorDictModuleBase``, TorchRL's ``RandomPolicy``, or any callable
            taking and returning a TensorDict.
        observation_space, action_space, num_envs, device: as for :class:`ModulePolicy`.
        unbatched: call the policy on one env's TensorDict (batch size ``[]``), as TorchRL does for
            an env without a batch size; ``num_envs`` must then be 1.
    """

    # set by bind(): per-step input TensorDicts, (key, output view) pairs, (key, carried state
    # view) pairs, and (carry, extra) pairs copied at a batch's end
    _inputs: list[TensorDictBase]
    _private: list[tuple[NestedKey, _PrivateInput]]  # the policy's own copy of each observation entry
    _outputs: list[list[tuple[tuple[str, ...], torch.Tensor]]]
    _carried: list[list[tuple[tuple[str, ...], torch.Tensor]]]
    _last: list[tuple[torch.Tensor, torch.Tensor]]

    def __init__(
        self,
        module: Callable[[TensorDictBase], TensorDictBase],
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        num_envs: int,
        device: torch.device | None = None,
        unbatched: bool = False,
    ) -> None:
        if unbatched and num_envs != 1:
            raise ValueError(f"an unbatched TensorDict policy steps one env, got num_envs={num_envs}")
        self.callable = _on_device(module, device)
        self.module = self.callable if isinstance(self.callable, torch.nn.Module) else None
        self.device = device
        self.unbatched = unbatched
        self._obs_keys = [f.key for f in observation_fields(observation_space)]
        sample = TensorDict(_sample_observations(observation_space, num_envs), batch_size=[num_envs])
        with torch.inference_mode():
            out = self._forward(sample[0] if unbatched else sample)
        if unbatched:
            out = out.unsqueeze(0)
        if ("action",) not in _leaf_keys(out):
            raise ValueError(
                f"the TensorDict policy wrote keys {_leaf_keys(out)} but no 'action' key"
            )
        _check_action(out.get("action"), action_space, num_envs)
        self.action_dtype = out.get("action").dtype
        self._action_field = action_fields(action_space)[0]
        self.extras = tuple(
            Field(key, tuple(out.get(key).shape[1:]), out.get(key).dtype)
            for key in _leaf_keys(out)
            if key != ("action",) and key not in self._obs_keys
        )
        reads = {(k,) if isinstance(k, str) else tuple(k) for k in getattr(self.callable, "in_keys", ())}
        #: the extras the policy reads back (its in_keys, or private keys, "_"-prefixed, which
        #: modules read without listing them): state carried from each step to the next
        self.carried = tuple(field.key for field in self.extras if field.key[0] != "next" and (
            field.key in reads or is_private_key(field.key)))
        self.carry = {key: torch.zeros((num_envs, *out.get(key).shape[1:]), dtype=out.get(key).dtype)
                      for key in self.carried}  # what the step before a batch's first wrote

    def _forward(self, td: TensorDictBase) -> TensorDictBase:
        if self.device is not None:
            td = td.to(self.device, non_blocking=True)
        return self.callable(td)

    def _views(self, buffers: BatchBuffers) -> dict[str, Any]:
        steps = buffers.num_steps
        # unbatched: env 0's entries, without the env dimension
        env, batch_size = (0, []) if self.unbatched else (slice(None), [buffers.num_envs])
        private = {k: _PrivateInput([v[env, t] for t in range(steps)]) for k, v in buffers.obs_ext.items()}
        inputs = [TensorDict({k: p.scratch for k, p in private.items()}, batch_size=batch_size)
                  for t in range(steps)]
        outputs = [
            [(("action",), buffers.action[env, t])]
            + [(key, buffers.extras[key][env, t]) for key in buffers.extras]
            for t in range(steps)
        ]
        carried = [[(key, self.carry[key][env] if t == 0 else buffers.extras[key][env, t - 1])
                    for key in self.carried] for t in range(steps)]
        last = [(self.carry[key], buffers.extras[key]) for key in self.carried]
        return {"_inputs": inputs, "_private": list(private.items()), "_outputs": outputs,
                "_carried": carried, "_last": last}

    def act(self, t: int) -> None:
        inputs = self._inputs[t]
        for key, private in self._private:  # the policy's own copy, (re)set: it may have replaced it
            inputs.set(key, private.take(t))
        for key, previous in self._carried[t]:  # (re)set: the policy may have replaced the entry
            inputs.set(key, previous)
        out = self._forward(inputs)
        for key, view in self._outputs[t]:
            value = out.get(key)
            if self.check_writes and (value.__class__ is not torch.Tensor or value.shape != view.shape
                                      or value.dtype is not view.dtype):
                checked_output(value, view.shape, view.dtype, ".".join(key), t)
            view.copy_(value)

    def finish(self, steps: int) -> None:
        if steps:  # the last step's state opens the next batch
            for carry, source in self._last:
                carry.copy_(source[:, steps - 1])

    def outputs(self, obs: Mapping[NestedKey, torch.Tensor]) -> list[torch.Tensor]:
        first = next(iter(obs.values()))
        out = self._forward(TensorDict(dict(obs), batch_size=first.shape[:1]))
        values = [out.get("action"), *(out.get(field.key) for field in self.extras)]
        if self.check_writes:
            for field, value in zip((self._action_field, *self.extras), values, strict=True):
                checked_output(value, (first.shape[0], *field.shape), field.dtype, ".".join(field.key), None)
        return values


def _is_tensordict_policy(policy: Any) -> bool:
    """Whether ``policy`` is called on TensorDicts: a ``TensorDictModuleBase``, TorchRL's
    ``RandomPolicy`` (which TorchRL's collectors call that way too), a callable with ``in_keys``
    and ``out_keys``, or one whose one argument says it takes a TensorDict (TorchRL's rule: named
    ``tensordict`` or ``td``, or annotated with a ``TensorDictBase`` type)."""
    return isinstance(policy, TensorDictModuleBase) or _is_torchrl_random_policy(policy) or (
        hasattr(policy, "in_keys") and hasattr(policy, "out_keys")
    ) or _takes_a_tensordict(policy)


def _takes_a_tensordict(policy: Any) -> bool:
    try:
        signature = inspect.signature(getattr(policy, "forward", policy))
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in signature.parameters.values() if p.kind in kinds]
    if len(positional) != 1:
        return False
    (parameter,) = positional
    annotation = parameter.annotation
    if parameter.name in ("tensordict", "td"):
        return True
    if isinstance(annotation, str):  # postponed annotations
        return "TensorDict" in annotation
    return isinstance(annotation, type) and issubclass(annotation, TensorDictBase)


def _is_torchrl_random_policy(policy: Any) -> bool:
    module = sys.modules.get("torchrl.modules")  # never imported here: loaded if the user has one
    return module is not None and isinstance(policy, module.RandomPolicy)


def _required_arguments(policy: Any) -> tuple[list[str], list[str]] | None:
    """The names of ``policy``'s (or its ``forward``'s) keyword-capable arguments, and of those
    without a default; ``None`` where the signature cannot be read."""
    try:
        signature = inspect.signature(getattr(policy, "forward", policy))
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = [name for name, p in signature.parameters.items() if p.kind in kinds]
    return names, [name for name in names if signature.parameters[name].default is inspect.Parameter.empty]


def _keyword_policy(policy: Any, observation_space: gym.Space[Any]) -> TensorDictModuleBase | None:
    """A plain callable whose required arguments are all named after entries of a Dict
    observation space (``forward(self, observation, mask)``), as a ``TensorDictModule`` reading
    those entries and writing ``action`` (and ``output1``, ... for a tuple), as TorchRL's
    collectors wrap it; else ``None``. A callable that requires several arguments, not all named
    after entries (the one entry of a non-Dict space is ``observation``), is refused."""
    arguments = _required_arguments(policy)
    if arguments is None:
        return None
    names, required = arguments
    if isinstance(observation_space, gym.spaces.Dict):
        leaves = {name for name, space in observation_space.spaces.items()
                  if not isinstance(space, gym.spaces.Dict)}  # entries a tensor argument can take
    else:
        leaves = {"observation"}
    if len(required) > 1 and not set(required) <= leaves:  # no way to call it with one observation
        raise TypeError(f"Arguments to policy.forward are incompatible with entries in the observation: "
                        f"it requires {required}, the observation has {sorted(leaves)}. Name its arguments "
                        "after observation entries, or pass a TensorDictModule")
    if not isinstance(observation_space, gym.spaces.Dict) or not required or not set(required) <= leaves:
        return None
    in_keys = [name for name in names if name in leaves]
    sample = _sample_observations(observation_space, 1)
    with torch.inference_mode():
        out = policy(**{key: sample[(key,)] for key in in_keys})
    return _outputs_module(policy, in_keys, len(out) if isinstance(out, tuple) else 1)


def _outputs_module(policy: Any, in_keys: list[str], outputs: int) -> TensorDictModuleBase:
    """``policy`` as TorchRL wraps a plain callable: it writes ``action``, then ``output1``, ..."""
    out_keys = ["action"] + [f"output{i}" for i in range(1, outputs)]
    return TensorDictModule(policy, in_keys=in_keys, out_keys=out_keys)


class _TupleOutput(Exception):
    """The dry step of a callable taking ``observation`` returned a tuple of ``size`` values."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def make_policy(
    policy: Any,
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
    num_envs: int,
    *,
    device: torch.device | None = None,
    exploration_type: InteractionType = InteractionType.RANDOM,
    unbatched: bool = False,
) -> PolicyAdapter:
    """The adapter for ``policy`` (see the module docstring), checked by a dry step.

    A plain callable on Dict observations whose required arguments are all named after
    observation entries is called with those entries, as TorchRL's collectors do; one taking
    ``observation`` and returning a tuple writes ``action``, ``output1``, ``output2``, ...
    ``unbatched``: a TensorDict policy is called on one env's TensorDict (batch size ``[]``; see
    :class:`TensorDictPolicy`).

    Raises:
        TypeError: ``policy`` is not callable, or takes tensors but observations are a Dict.
        ValueError: the policy's output does not fit the action space (shapes and dtypes named).
    """
    if not callable(policy):
        raise TypeError(
            f"policy must be None, an nn.Module, a TensorDictModule or a callable; "
            f"got {type(policy).__name__}"
        )
    try:
        with set_interaction_type(exploration_type):
            keyword = None if _is_tensordict_policy(policy) else _keyword_policy(policy, observation_space)
            if keyword is not None or _is_tensordict_policy(policy):
                adapter = TensorDictPolicy(keyword or policy, observation_space, action_space, num_envs,
                                           device, unbatched)
                if keyword is not None:  # the weights are the user's module's, not the wrapper's
                    inner = adapter.callable.module
                    adapter.module = inner if isinstance(inner, torch.nn.Module) else None
                return adapter
            try:
                return ModulePolicy(policy, observation_space, action_space, num_envs, device)
            except _TupleOutput as returned:  # forward(observation) -> (action, ...): TorchRL's rule
                wrapped = _outputs_module(policy, ["observation"], returned.size)
                adapter = TensorDictPolicy(wrapped, observation_space, action_space, num_envs, device,
                                           unbatched)
                adapter.module = policy if isinstance(policy, torch.nn.Module) else None
                return adapter
    except Exception as error:
        if _has_float64(observation_space):  # the usual cause: a float32 network, float64 observations
            error.add_note(f"The policy was called on float64 observations ({observation_space}); "
                           "obs_dtype='float32' (--obs-dtype float32 on the command line) stores them, and "
                           "passes them to the policy, as float32.")
        raise


def _has_float64(space: gym.Space[Any]) -> bool:
    if isinstance(space, gym.spaces.Dict):
        return any(_has_float64(sub) for sub in space.spaces.values())
    return isinstance(space, gym.spaces.Box) and space.dtype == np.float64
