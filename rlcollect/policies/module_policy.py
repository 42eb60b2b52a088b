"""A module or callable from observations to actions, as a policy adapter: :class:`ModulePolicy`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import action_fields
from rlcollect.policies.adapter import (
    NestedKey,
    PolicyAdapter,
    PrivateInput,
    check_action,
    checked_output,
    on_device,
    reads_input_only,
    sample_observations,
)

__all__ = ["ModulePolicy", "NumpyActions", "TupleOutput", "required_arguments"]


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
    _input: PrivateInput  # the policy's own copy of slot t
    _take: Callable[[int], torch.Tensor]  # slot t as the policy gets it (a copy, or the view)
    _action_views: list[torch.Tensor]
    _action_shape: torch.Size
    _action_dtype: torch.dtype

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
        self.callable = on_device(module, device)
        self.module = self.callable if isinstance(self.callable, torch.nn.Module) else None
        self.device = device
        self._moves_obs = device is not None and device.type != "cpu"  # buffers live on the CPU
        sample = next(iter(sample_observations(observation_space, num_envs).values()))
        self.action_field = action_fields(action_space)[0]
        with torch.inference_mode():
            out = self._forward(sample)
            if isinstance(out, np.ndarray | np.generic):  # SB3's model.predict, a numpy policy
                self.callable, out = NumpyActions(self.callable), numpy_actions(out)
            arguments = required_arguments(module)
            if isinstance(out, tuple) and arguments is not None and arguments[1] == ["observation"]:
                raise TupleOutput(len(out))  # make_policy wraps it as TorchRL does
            check_action(out, action_space, num_envs)
        self.action_dtype = out.dtype

    def _forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self._moves_obs:
            obs = obs.to(self.device, non_blocking=True)
        return cast(torch.Tensor, self.callable(obs))

    def _views(self, buffers: BatchBuffers) -> dict[str, Any]:
        obs = next(iter(buffers.obs_ext.values()))
        # one view per step, made once: indexing a tensor costs more than the copy itself
        views = [obs[:, t] for t in range(buffers.num_steps)]
        return {
            "_obs_views": views,
            "_input": PrivateInput(views),
            "_action_views": [buffers.action[:, t] for t in range(buffers.num_steps)],
            "_action_shape": buffers.action[:, 0].shape,
            "_action_dtype": buffers.action.dtype,
        }

    def bind(self, buffers: BatchBuffers) -> None:
        super().bind(buffers)
        # chosen at each batch (a hook may come later): the policy's own copy of each step's
        # observations (what it does to them never reaches the batch), on its device or here;
        # the batch's view where it can neither write into its input nor keep it (a copy costs
        # 5 % of a CartPole step)
        if self._moves_obs:
            self._take = self._on_device
        else:
            self._take = self._obs_views.__getitem__ if reads_input_only(self.callable) else self._input.take

    def _on_device(self, t: int) -> torch.Tensor:
        return self._obs_views[t].to(self.device, non_blocking=True)

    def act(self, t: int) -> None:
        out = self.callable(self._take(t))
        # checked before it is written (copy_ would cast or broadcast it) and not kept: holding
        # each step's output until the batch ends splits the heap under the policy's next
        # temporaries, which then come from fresh pages every step (15 % of a 1,024-env step)
        if self.check_writes and (out.__class__ is not torch.Tensor or out.shape != self._action_shape
                                  or out.dtype is not self._action_dtype):
            out = checked_output(out, self._action_shape, self._action_dtype, "action", t)
        try:
            self._action_views[t].copy_(out)
        except (TypeError, RuntimeError):  # not a tensor, or a shape torch cannot write: name it
            out = checked_output(out, self._action_shape, self._action_dtype, "action", t)
            self._action_views[t].copy_(out)  # [N] actions for a space of shape (1,): reshaped

    def outputs(self, obs: Mapping[NestedKey, torch.Tensor]) -> list[torch.Tensor]:
        first = next(iter(obs.values()))
        out = self._forward(first)
        if self.check_writes:
            field = self.action_field
            out = checked_output(out, (first.shape[0], *field.shape), field.dtype, "action", None)
        return [out]


class NumpyActions:
    """A policy that returns numpy arrays (Stable-Baselines3's ``model.predict``, a hand-written
    numpy policy), as one that returns tensors: its actions as they are (``torch.from_numpy``: no
    copy, no cast), then checked as every policy's.

    Examples:
        >>> import numpy as np
        >>> NumpyActions(lambda obs: np.zeros(len(obs), dtype=np.int64))(torch.ones(3, 4))
        tensor([0, 0, 0])
    """

    def __init__(self, policy: Callable[[torch.Tensor], Any]) -> None:
        self.policy = policy

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        return numpy_actions(self.policy(obs))


def numpy_actions(actions: Any) -> torch.Tensor:
    """``actions`` (a numpy array or scalar) as a tensor sharing its memory; copied only where
    torch cannot share it (negative strides, read-only)."""
    array = np.asarray(actions)
    if not array.flags.writeable or any(stride < 0 for stride in array.strides):
        array = np.array(array)
    return torch.from_numpy(array)


class TupleOutput(Exception):
    """The dry step of a callable taking ``observation`` returned a tuple of ``size`` values."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def required_arguments(policy: Any) -> tuple[list[str], list[str]] | None:
    """The names of ``policy``'s (or its ``forward``'s) keyword-capable arguments, and of those
    without a default; ``None`` where the signature cannot be read."""
    try:
        signature = inspect.signature(getattr(policy, "forward", policy))
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = [name for name, p in signature.parameters.items() if p.kind in kinds]
    return names, [name for name in names if signature.parameters[name].default is inspect.Parameter.empty]
