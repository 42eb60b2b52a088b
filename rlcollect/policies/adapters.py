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

import inspect
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModule, TensorDictModuleBase, set_interaction_type

from rlcollect.common.callers import raised_outside
from rlcollect.common.generators import kept_generators
from rlcollect.policies.adapter import (
    PolicyAdapter,
    sample_observations,
)
from rlcollect.policies.module_policy import ModulePolicy, TupleOutput, required_arguments
from rlcollect.policies.tensordict_policy import TensorDictPolicy

__all__ = ["make_policy"]


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


def _keyword_policy(policy: Any, observation_space: gym.Space[Any]) -> TensorDictModuleBase | None:
    """A plain callable whose required arguments are all named after entries of a Dict
    observation space (``forward(self, observation, mask)``), as a ``TensorDictModule`` reading
    those entries and writing ``action`` (and ``output1``, ... for a tuple), as TorchRL's
    collectors wrap it; else ``None``. A callable that requires several arguments, not all named
    after entries (the one entry of a non-Dict space is ``observation``), is refused."""
    arguments = required_arguments(policy)
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
    sample = sample_observations(observation_space, 1)
    with torch.inference_mode():
        out = policy(**{key: sample[(key,)] for key in in_keys})
    return _outputs_module(policy, in_keys, len(out) if isinstance(out, tuple) else 1)


def _outputs_module(policy: Any, in_keys: list[str], outputs: int) -> TensorDictModuleBase:
    """``policy`` as TorchRL wraps a plain callable: it writes ``action``, then ``output1``, ..."""
    out_keys = ["action"] + [f"output{i}" for i in range(1, outputs)]
    return TensorDictModule(policy, in_keys=in_keys, out_keys=out_keys)


def make_policy(
    policy: Any,
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
    num_envs: int,
    *,
    device: torch.device | None = None,
    exploration_type: InteractionType = InteractionType.RANDOM,
    unbatched: bool = False,
    episode_starts: bool = True,
    action_at_build: bool = True,
) -> PolicyAdapter:
    """The adapter for ``policy`` (see the module docstring), checked by a dry step.

    A plain callable on Dict observations whose required arguments are all named after
    observation entries is called with those entries, as TorchRL's collectors do; one taking
    ``observation`` and returning a tuple writes ``action``, ``output1``, ``output2``, ...
    ``unbatched``: a TensorDict policy is called on one env's TensorDict (batch size ``[]``; see
    :class:`TensorDictPolicy`). ``episode_starts``: the collector gives a policy reading
    ``is_init`` which envs start an episode (see :class:`TensorDictPolicy`). ``action_at_build``:
    a TensorDict policy that writes no action is refused now (``False``: when it first acts).

    Raises:
        TypeError: ``policy`` is not callable, or takes tensors but observations are a Dict.
        ValueError: the policy's output does not fit the action space (shapes and dtypes named).
    """
    if not callable(policy) or isinstance(policy, type):
        instance = f": pass an instance, {policy.__name__}(...)" if isinstance(policy, type) else ""
        raise TypeError(
            f"policy must be None, an nn.Module, a TensorDictModule or a callable; "
            f"got {_what(policy)}{instance}"
        )
    try:
        with set_interaction_type(exploration_type), kept_generators(policy):  # the dry step draws nothing
            keyword = None if _is_tensordict_policy(policy) else _keyword_policy(policy, observation_space)
            if keyword is not None or _is_tensordict_policy(policy):
                adapter = TensorDictPolicy(keyword or policy, observation_space, action_space, num_envs,
                                           device, unbatched, episode_starts, action_at_build)
                if keyword is not None:  # the weights are the user's module's, not the wrapper's
                    inner = adapter.callable.module
                    adapter.module = inner if isinstance(inner, torch.nn.Module) else None
                return adapter
            try:
                return ModulePolicy(policy, observation_space, action_space, num_envs, device)
            except TupleOutput as returned:  # forward(observation) -> (action, ...): TorchRL's rule
                wrapped = _outputs_module(policy, ["observation"], returned.size)
                adapter = TensorDictPolicy(wrapped, observation_space, action_space, num_envs, device,
                                           unbatched, episode_starts)
                adapter.module = policy if isinstance(policy, torch.nn.Module) else None
                return adapter
    except Exception as error:
        _explain(error, observation_space, num_envs)
        raise


def _what(policy: Any) -> str:
    return f"the class {policy.__name__}" if isinstance(policy, type) else type(policy).__name__


def _explain(error: Exception, observation_space: gym.Space[Any], num_envs: int) -> None:
    """Notes on an error of the policy's first call: what it was called on, where its own code
    raised, and the usual cause when the observations are float64 (Python 3.11's notes)."""
    if not hasattr(error, "add_note"):
        return
    if raised_outside(error):
        error.add_note(f"Raised by the policy's first call, which the collector makes when it is built "
                       f"to check the actions: on {_observations(observation_space, num_envs)}.")
    if _has_float64(observation_space):  # the usual cause: a float32 network, float64 observations
        error.add_note(f"The policy was called on float64 observations ({observation_space}); "
                       "obs_dtype='float32' (--obs-dtype float32 on the command line) stores them, and "
                       "passes them to the policy, as float32.")


def _observations(space: gym.Space[Any], num_envs: int) -> str:
    """What a policy is called on, e.g. ``observations of shape (8, 4) float32``."""
    if isinstance(space, gym.spaces.Dict):
        return "the observation entries " + ", ".join(
            f"{key} {_observations(sub, num_envs).removeprefix('observations of shape ')}"
            for key, sub in space.spaces.items())
    shape = getattr(space, "shape", None)
    dtype = getattr(space, "dtype", None)
    if shape is None or dtype is None:
        return f"the observations of {num_envs} env(s) of {space}"
    return f"observations of shape {(num_envs, *shape)} {np.dtype(dtype).name}"


def _has_float64(space: gym.Space[Any]) -> bool:
    if isinstance(space, gym.spaces.Dict):
        return any(_has_float64(sub) for sub in space.spaces.values())
    return isinstance(space, gym.spaces.Box) and space.dtype == np.float64
