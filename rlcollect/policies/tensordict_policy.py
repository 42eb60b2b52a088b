"""A TensorDict policy (a ``TensorDictModule``, or a callable taking and returning a TensorDict) as a
policy adapter: :class:`TensorDictPolicy`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import Field, action_fields, is_private_key, observation_fields
from rlcollect.policies.adapter import (
    NestedKey,
    PolicyAdapter,
    PrivateInput,
    check_action,
    checked_output,
    on_device,
    sample_observations,
)

__all__ = ["TensorDictPolicy"]


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
    _private: list[tuple[NestedKey, PrivateInput]]  # the policy's own copy of each observation entry
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
        self.callable = on_device(module, device)
        self.module = self.callable if isinstance(self.callable, torch.nn.Module) else None
        self.device = device
        self.unbatched = unbatched
        self._obs_keys = [f.key for f in observation_fields(observation_space)]
        sample = TensorDict(sample_observations(observation_space, num_envs), batch_size=[num_envs])
        with torch.inference_mode():
            out = self._forward(sample[0] if unbatched else sample)
        if unbatched:
            out = out.unsqueeze(0)
        if ("action",) not in _leaf_keys(out):
            raise ValueError(
                f"the TensorDict policy wrote keys {_leaf_keys(out)} but no 'action' key"
            )
        check_action(out.get("action"), action_space, num_envs)
        self.action_dtype = out.get("action").dtype
        self.action_field = action_fields(action_space)[0]
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
        private = {k: PrivateInput([v[env, t] for t in range(steps)]) for k, v in buffers.obs_ext.items()}
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
            for field, value in zip((self.action_field, *self.extras), values, strict=True):
                checked_output(value, (first.shape[0], *field.shape), field.dtype, ".".join(field.key), None)
        return values
