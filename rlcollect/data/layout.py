"""From Gymnasium spaces to the batch layout: which tensors a batch holds, their shapes and dtypes.

A :class:`Field` is one leaf of the batch (``observation``, ``action``, a policy extra). Spaces map
to fields once, at construction; the rollout loop then only writes into tensors laid out from them.

Examples:
    >>> from gymnasium import spaces
    >>> [str(f) for f in observation_fields(spaces.Box(-1, 1, (3,)))]
    ['observation: (3,) torch.float32']
    >>> space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "id": spaces.Discrete(4)})
    >>> [str(f) for f in observation_fields(space)]
    ['id: () torch.int64', 'pos: (2,) torch.float32']
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

__all__ = [
    "BatchLayout",
    "Field",
    "OneHotSpace",
    "DONE_FLAGS",
    "FILLED_KEYS",
    "FILLED_SUBTREES",
    "RESERVED_KEYS",
    "is_private_key",
    "action_fields",
    "get_nested",
    "observation_fields",
    "stored_observation_space",
    "torch_dtype",
]

#: Keys a Dict observation may not use: the batch itself needs them.
RESERVED_KEYS = frozenset({"action", "next", "collector", "policy_version"})

#: The done flags every frame holds under ``"next"`` (``done`` is ``terminated or truncated``).
DONE_FLAGS = ("terminated", "truncated", "done")

#: The keys the env's step and the collector fill in every batch besides the observations: no
#: policy output may take them (nor any key under :data:`FILLED_SUBTREES`).
FILLED_KEYS = frozenset({("next", "reward"), *(("next", flag) for flag in DONE_FLAGS), ("policy_version",)})

#: The subtrees the env's infos and the collector's ids fill.
FILLED_SUBTREES = (("next", "info"), ("collector",))

_LEAF_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


class OneHotSpace(spaces.Box):
    """One-hot vectors along the last axis (TorchRL's ``OneHot`` spec): a Box of 0s and 1s whose
    samples hold exactly one 1 per vector. Gymnasium's ``batch_space`` keeps the class.

    Examples:
        >>> space = OneHotSpace((3,), np.int64, seed=0)
        >>> int(space.sample().sum()), space.sample().dtype
        (1, dtype('int64'))
    """

    def __init__(
        self, shape: tuple[int, ...], dtype: Any, seed: int | np.random.Generator | None = None
    ) -> None:
        super().__init__(0, 1, shape, dtype, seed)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        index = self.np_random.integers(self.shape[-1], size=self.shape[:-1])
        return np.asarray(np.eye(self.shape[-1], dtype=self.dtype)[index])

    def contains(self, x: Any) -> bool:
        return bool(super().contains(x) and np.all(np.asarray(x).sum(-1) == 1))

    def __repr__(self) -> str:
        return f"OneHotSpace({self.shape}, {self.dtype})"


@batch_space.register(OneHotSpace)
def _batch_one_hot(space: OneHotSpace, n: int = 1) -> OneHotSpace:
    return OneHotSpace((n, *space.shape), space.dtype, seed=deepcopy(space.np_random))


@dataclass(frozen=True)
class Field:
    """One tensor of a batch: its key (a tuple, nested for Dict spaces), per-frame shape, dtype."""

    key: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"{'.'.join(self.key)}: {self.shape} {self.dtype}"


@dataclass(frozen=True)
class BatchLayout:
    """Every per-frame field of a batch besides the fixed ones (reward, flags, ids, version).

    ``observations`` appear twice in a batch (``key`` and ``("next", key)``); ``action`` once;
    ``extras`` are what a TensorDict policy writes beside the action (``action_log_prob``, ...).
    ``env_ids`` adds ``("collector", "env_ids")``: the env of each frame, for batches whose rows
    are not envs (an asynchronous EnvPool's frames, in the order they complete). ``is_init`` adds
    ``is_init`` (``[1]``, bool): whether the frame's observation is the first of an episode, for
    policies that carry state from step to step (see :class:`~rlcollect.policies.adapter.Carried`).
    ``infos`` are the values of the envs' step infos kept in the batch (``info_keys``), each at
    ``("next", "info", key)``. ``masked`` adds ``("collector", "mask")`` for envs some of whose
    steps are not transitions (a vector env's own reset steps, ``NEXT_STEP`` autoreset).
    """

    observations: tuple[Field, ...]
    action: Field
    extras: tuple[Field, ...] = ()
    dict_observations: bool = False  # observations arrive as (nested) dicts, one field per leaf
    env_ids: bool = False
    is_init: bool = False
    infos: tuple[Field, ...] = ()
    masked: bool = False


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype matching a numpy dtype (``np.float32`` -> ``torch.float32``)."""
    return torch.from_numpy(np.zeros((), dtype=np.dtype(dtype))).dtype


def _leaf_field(key: tuple[str, ...], space: spaces.Space[Any]) -> Field:
    if isinstance(space, spaces.Discrete):
        return Field(key, (), torch.int64)
    if isinstance(space, _LEAF_SPACES):
        assert space.shape is not None
        return Field(key, tuple(space.shape), torch_dtype(space.dtype))
    hint = (" (a Tuple: name its entries with a gymnasium.ObservationWrapper returning a Dict, or "
            "flatten it into a Box with gymnasium.wrappers.FlattenObservation)"
            if isinstance(space, spaces.Tuple) else "")
    raise TypeError(
        f"space {space!r} at key {'.'.join(key) or '<root>'} is not supported: "
        f"use Box, Discrete, MultiDiscrete, MultiBinary, or a Dict of those{hint}"
    )


def _fields(space: spaces.Space[Any], prefix: tuple[str, ...]) -> list[Field]:
    if isinstance(space, spaces.Dict):
        fields: list[Field] = []
        for name, subspace in space.spaces.items():
            fields.extend(_fields(subspace, (*prefix, str(name))))
        return fields
    return [_leaf_field(prefix, space)]


def observation_fields(space: spaces.Space[Any]) -> list[Field]:
    """Fields for an observation space: ``observation`` for a leaf, one key per Dict entry.

    Raises:
        TypeError: for a space other than Box, Discrete, MultiDiscrete, MultiBinary or Dict.
        ValueError: for a Dict entry named like a reserved batch key.
    """
    if not isinstance(space, spaces.Dict):
        return [_leaf_field(("observation",), space)]
    fields = _fields(space, ())
    for field in fields:
        if field.key[0] in RESERVED_KEYS:
            raise ValueError(
                f"observation space Dict key {field.key[0]!r} clashes with a batch key; "
                f"rename it (reserved: {sorted(RESERVED_KEYS)})"
            )
    return fields


def stored_observation_space(space: spaces.Space[Any], dtype: torch.dtype | None) -> spaces.Space[Any]:
    """``space`` with its floating-point ``Box`` entries in ``dtype`` (``None``: ``space`` itself):
    what a collector built with ``obs_dtype=dtype`` stores, and what its policy is called on.

    Examples:
        >>> box = spaces.Box(-1.0, 1.0, (3,), np.float64)
        >>> stored_observation_space(box, torch.float32).dtype
        dtype('float32')
    """
    if dtype is None:
        return space
    if isinstance(space, spaces.Dict):
        return spaces.Dict({name: stored_observation_space(sub, dtype) for name, sub in space.spaces.items()})
    if isinstance(space, spaces.Box) and space.dtype is not None and space.dtype.kind == "f":
        target = np.dtype(str(dtype).removeprefix("torch."))
        if space.dtype != target:
            low, high = space.low.astype(target), space.high.astype(target)
            return spaces.Box(low, high, space.shape, target)
    return space


def action_fields(space: spaces.Space[Any]) -> list[Field]:
    """The single ``action`` field for an action space.

    Raises:
        TypeError: for a Dict or any other unsupported action space.
    """
    if isinstance(space, spaces.Dict):
        raise TypeError(
            f"action space {space!r} is a Dict: a Gymnasium env's action space must be Box, "
            "Discrete, MultiDiscrete or MultiBinary. Collect it as a TorchRL env, "
            "create_env_fn=lambda: torchrl.envs.GymWrapper(make_env()) (the torchrl extra): the "
            "policy then writes each entry as a key of the batch, as in TorchRL; or wrap the env "
            "(gymnasium.wrappers.TransformAction) so that its action is one such space"
        )
    if isinstance(space, spaces.Tuple):
        raise TypeError(
            f"action space {space!r} is a Tuple: a Gymnasium env's action space must be Box, Discrete, "
            "MultiDiscrete or MultiBinary. Wrap the env (gymnasium.wrappers.TransformAction) so that its "
            "action is one such space: a MultiDiscrete for a Tuple of Discretes, a Box for a Tuple of Boxes"
        )
    return [_leaf_field(("action",), space)]


def is_private_key(key: str | tuple[str, ...]) -> bool:
    """Whether a (nested) key has a part starting with ``_``: a policy's private state, which
    TorchRL carries from step to step and leaves out of its batches.

    Examples:
        >>> is_private_key(("out", "_noise")), is_private_key("action")
        (True, False)
    """
    return any(part.startswith("_") for part in ((key,) if isinstance(key, str) else key))


def get_nested(value: Any, key: tuple[str, ...]) -> Any:
    """``value[key[0]][key[1]]...``: one leaf of a (nested) Dict observation."""
    for part in key:
        value = value[part] if isinstance(value, Mapping) else getattr(value, part)
    return value
