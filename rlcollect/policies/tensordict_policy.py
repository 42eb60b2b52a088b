"""A TensorDict policy (a ``TensorDictModule``, or a callable taking and returning a TensorDict) as a
policy adapter: :class:`TensorDictPolicy`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import (
    FILLED_KEYS,
    FILLED_SUBTREES,
    Field,
    action_fields,
    is_private_key,
    observation_fields,
)
from rlcollect.policies.adapter import (
    Carried,
    EpisodeStarts,
    NestedKey,
    PolicyAdapter,
    PrivateInput,
    check_action,
    checked_output,
    on_device,
    sample_observations,
)

__all__ = ["TensorDictPolicy"]

_IS_INIT = ("is_init",)


def _carried(written: tuple[Field, ...], reads: set[NestedKey], observed: list[NestedKey], resets: bool
             ) -> tuple[Carried, ...]:
    """The state among what the policy writes: each entry it reads back at the next step (listed
    in its in_keys, under its own key or, TorchRL's recurrent modules' way, written under
    ``"next"``, which wins where it writes both, as TorchRL's ``step_mdp`` moves ``"next"`` to the
    root), or private (``_``-prefixed: modules read such state without listing it). State the env
    observes (a TorchRL env with the module's primer) is the env's to carry. ``resets``: the
    listed state is zeros at each episode's first step."""
    keys = {field.key for field in written}
    carried = []
    for field in written:
        key = field.key
        if key[0] == "next" and key[1:] in reads and key[1:] not in observed:
            carried.append(Carried(key[1:], key, resets=resets))
        elif key[0] != "next" and (key in reads or is_private_key(key)) and ("next", *key) not in keys:
            carried.append(Carried(key, key, resets=resets and key in reads))
    return tuple(carried)


def _refuse_batch_keys(out: TensorDictBase) -> None:
    """Raise if the dry step's ``out`` writes a key the env's step or the collector fills in the
    batch (the reward, a done flag, an info, the collector's ids, the version): the batch could
    hold only one of the two values. (An observation the policy writes over is not stored: the
    batch holds the env's, which the next frame's ``("next", ...)`` continues.)"""
    clashes = [key for key in _leaf_keys(out)
               if key in FILLED_KEYS or any(key[:len(tree)] == tree for tree in FILLED_SUBTREES)]
    if clashes:
        key = ".".join(clashes[0])
        owner = "collector" if clashes[0][0] in ("collector", "policy_version") else "env's step"
        raise ValueError(f"the policy writes {key!r}, which the batch holds as the {owner} wrote it: the "
                         f"policy's value would be lost; write it under a key of its own, such as "
                         f"{key.replace('.', '_') + '_policy'!r}")


def _leaf_keys(td: TensorDictBase) -> list[tuple[str, ...]]:
    return [(k,) if isinstance(k, str) else tuple(k) for k in td.keys(True, True)]


class _WritesNoAction:
    """In place of a policy whose dry step wrote no action, in a collector built as TorchRL builds
    it: each call raises the dry step's error (no batch is ever stored without actions)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        raise ValueError(self.message)


class TensorDictPolicy(PolicyAdapter):
    """A TensorDict policy, called the TorchRL way: on a TensorDict of the step's observations,
    reading its ``in_keys`` and writing ``action`` and any extras into it (or into the TensorDict
    it returns).

    Extras are found by the dry step: every leaf the policy writes besides ``action`` and the
    observation keys gets its own buffer and lands in the batch. The TensorDicts the policy is
    called on are views of the batch buffers, built once per buffers and step, never per step.

    State the policy carries from step to step (see :class:`~rlcollect.policies.adapter.Carried`:
    an extra it lists in its ``in_keys``, written under its own key or under ``"next"``, or a
    private one, ``_``-prefixed, such as TorchRL's Ornstein-Uhlenbeck noise ``_ou_prev_noise``):
    step ``t`` reads what step ``t - 1`` wrote, as TorchRL's collectors carry keys from one step to
    the next. A policy listing ``is_init`` in its ``in_keys`` is given it (``[N, 1]`` bool, ``True``
    where the observation is an episode's first), the batch stores it, and the state the policy
    lists is zeros at each episode's first step (as TorchRL's primer makes it); other state is kept
    across episode ends, as in TorchRL without a primer. The dry step gives ``is_init`` all
    ``True`` and no state: a recurrent policy makes its first state where the state is missing,
    as TorchRL's ``LSTMModule`` does.

    Args:
        module: the policy: a ``TensorDictModuleBase``, TorchRL's ``RandomPolicy``, or any callable
            taking and returning a TensorDict.
        observation_space, action_space, num_envs, device: as for :class:`ModulePolicy`.
        unbatched: call the policy on one env's TensorDict (batch size ``[]``), as TorchRL does for
            an env without a batch size; ``num_envs`` must then be 1.
        episode_starts: give a policy that reads ``is_init`` which envs start an episode, and
            reset its state there (``False``: a TorchRL env's ``InitTracker`` observes it, as in
            TorchRL's collectors, and a policy reading it on an env without one fails its dry step).
        action_at_build: refuse a policy whose dry step writes no ``action`` now (``False``, as
            TorchRL's collectors: when it first acts, with the same message).
    """

    # set by bind(), per step: the input TensorDict, the policy's own copy of each observation
    # entry, (key, output view) pairs, the is_init view and the flags it is made of (the step
    # before's; none at a batch's first step, which the loop fills), what each carried state was
    # written as at the step before, and where stored state inputs go; at a batch's end: (carry,
    # extra) pairs
    _inputs: list[TensorDictBase]
    _private: list[tuple[NestedKey, PrivateInput]]
    _outputs: list[list[tuple[tuple[str, ...], torch.Tensor]]]
    _starts: EpisodeStarts | None
    _previous: list[dict[NestedKey, torch.Tensor]]
    _state_targets: list[dict[NestedKey, torch.Tensor]]
    _last: list[tuple[torch.Tensor, torch.Tensor]]

    def __init__(
        self,
        module: Callable[[TensorDictBase], TensorDictBase],
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        num_envs: int,
        device: torch.device | None = None,
        unbatched: bool = False,
        episode_starts: bool = True,
        action_at_build: bool = True,
    ) -> None:
        if unbatched and num_envs != 1:
            raise ValueError(f"an unbatched TensorDict policy steps one env, got num_envs={num_envs}")
        self.callable = on_device(module, device)
        self.module = self.callable if isinstance(self.callable, torch.nn.Module) else None
        self.device = device
        self.unbatched = unbatched
        self._obs_keys = [f.key for f in observation_fields(observation_space)]
        reads = {(k,) if isinstance(k, str) else tuple(k) for k in getattr(self.callable, "in_keys", ())}
        # is_init comes from the collector, unless the env observes it itself (TorchRL's InitTracker)
        self.reads_is_init = episode_starts and _IS_INIT in reads and _IS_INIT not in self._obs_keys
        sample = TensorDict(sample_observations(observation_space, num_envs), batch_size=[num_envs])
        if self.reads_is_init:  # the dry step: every env starts an episode
            sample.set(_IS_INIT, torch.ones(num_envs, 1, dtype=torch.bool))
        with torch.inference_mode():
            out = self._forward(sample[0] if unbatched else sample)
        if unbatched:
            out = out.unsqueeze(0)
        _refuse_batch_keys(out)
        if ("action",) in _leaf_keys(out):
            check_action(out.get("action"), action_space, num_envs)
            self.action_dtype = out.get("action").dtype
        else:
            missing = f"the TensorDict policy wrote keys {_leaf_keys(out)} but no 'action' key"
            if action_at_build:
                raise ValueError(missing)
            self.callable, self.action_dtype = _WritesNoAction(missing), None  # self.module stays
        self.action_field = action_fields(action_space)[0]
        written = tuple(
            Field(key, tuple(out.get(key).shape[1:]), out.get(key).dtype)
            for key in _leaf_keys(out)
            if key not in (("action",), _IS_INIT) and key not in self._obs_keys
        )
        self.carried = _carried(written, reads, self._obs_keys, self.reads_is_init)
        stored = {c.read: c.written for c in self.carried if c.stored}
        by_key = {f.key: f for f in written}
        #: what the policy writes besides the action, then the state it reads (stored apart)
        self.extras = written + tuple(replace(by_key[w], key=r) for r, w in stored.items() if r not in by_key)
        self._stored_reads = {f.key for f in self.extras[len(written):]}
        self.carry = {  # what the step before a batch's first wrote
            c.written: torch.zeros((num_envs, *by_key[c.written].shape), dtype=by_key[c.written].dtype)
            for c in self.carried}

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
            + [(key, buffers.extras[key][env, t]) for key in buffers.extras if key not in self._stored_reads]
            for t in range(steps)
        ]
        starts = EpisodeStarts(buffers, env) if buffers.is_init is not None and self.reads_is_init else None
        previous = [{c.written: buffers.extras[c.written][env, t - 1] if t else self.carry[c.written][env]
                     for c in self.carried} for t in range(steps)]
        targets = [{key: buffers.extras[key][env, t] for key in self._stored_reads} for t in range(steps)]
        last = [(self.carry[c.written], buffers.extras[c.written]) for c in self.carried]
        return {"_inputs": inputs, "_private": list(private.items()), "_outputs": outputs, "_starts": starts,
                "_previous": previous, "_state_targets": targets, "_last": last}

    def act(self, t: int) -> None:
        inputs = self._inputs[t]
        for key, private in self._private:  # the policy's own copy, (re)set: it may have replaced it
            inputs.set(key, private.take(t))
        starts = None
        if self._starts is not None:  # whether each env starts an episode: did its step before end one?
            starts = self._starts.at(t)
            inputs.set(_IS_INIT, starts)
        if self.carried:  # (re)set: the policy may have replaced the entries
            targets = self._state_targets[t]
            for key, value in self.state_inputs(self._previous[t], starts).items():
                if key in targets:
                    value = targets[key].copy_(value)
                inputs.set(key, value)
        out = self._forward(inputs)
        for key, view in self._outputs[t]:
            value = out.get(key)
            if self.check_writes and (value.__class__ is not torch.Tensor or value.shape != view.shape
                                      or value.dtype is not view.dtype):
                value = checked_output(value, view.shape, view.dtype, ".".join(key), t)
            view.copy_(value)

    def finish(self, steps: int) -> None:
        if steps:  # the last step's state opens the next batch
            for carry, source in self._last:
                carry.copy_(source[:, steps - 1])

    def outputs(self, obs: Mapping[NestedKey, torch.Tensor]) -> list[torch.Tensor]:
        """The action, then each extra, for ``obs`` (observations, and ``is_init`` and the state
        inputs of :meth:`state_inputs` where the policy needs them): a stored state input is
        returned as given."""
        first = next(iter(obs.values()))
        out = self._forward(TensorDict(dict(obs), batch_size=first.shape[:1]))
        stored = self._stored_reads
        values = [out.get("action"),
                  *(obs[f.key] if f.key in stored else out.get(f.key) for f in self.extras)]
        if self.check_writes:
            fields = (self.action_field, *self.extras)
            values = [checked_output(value, (len(first), *f.shape), f.dtype, ".".join(f.key), None)
                      for f, value in zip(fields, values, strict=True)]
        return values
