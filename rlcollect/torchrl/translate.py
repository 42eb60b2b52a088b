"""TorchRL's own collector arguments, translated into rlcollect's before a core collector sees them.

Each one becomes what rlcollect does the same way (a batch step, a replay writer, a setting made
after the collector is built), is accepted where TorchRL's default is all rlcollect does, or is
refused with what to use instead. :func:`take_torchrl_arguments` removes them from a call's
keyword arguments and returns the translation.

Examples:
    >>> kwargs = {"frames_per_batch": 8, "cat_results": 0, "track_traj_ids": False, "use_buffers": True}
    >>> translation = take_torchrl_arguments(kwargs)
    >>> sorted(kwargs), [type(step).__name__ for step in translation.steps]
    (['frames_per_batch'], ['GroupWorkers', 'WithoutTrajIds'])
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from rlcollect.collectors.checks import check_callable, check_flag, check_int
from rlcollect.collectors.delivery import ReplayWriter
from rlcollect.common.callers import outside_stacklevel
from rlcollect.data.checks import short_repr
from rlcollect.data.formats import BatchShape, BatchStep, Layout
from rlcollect.torchrl.layout import TorchRLLayout

__all__ = ["TORCHRL_ARGUMENTS", "CompactObs", "GroupWorkers", "Translation", "WithoutTrajIds",
           "WorkerInit", "take_torchrl_arguments"]

#: TorchRL's own arguments the collectors of :mod:`rlcollect.torchrl` take, and their defaults.
TORCHRL_ARGUMENTS: dict[str, Any] = {
    "cat_results": None, "extend_buffer": True, "use_buffers": None, "reset_when_done": True,
    "compact_obs": False, "trust_policy": None, "cudagraph_policy": None, "track_traj_ids": True,
    "trajs_per_write": None, "no_cuda_sync": None, "num_threads": None, "num_sub_threads": 1,
    "interruptor": None, "weight_recv_schemes": None, "worker_idx": None, "track_policy_version": False,
}
#: The values of ``cat_results`` (``None``: ``"stack"``).
CAT_RESULTS = (None, "stack", 0, -1)
#: What ``compact_obs`` keeps in ``"next"``.
_NEXT_KEPT = frozenset({"reward", "done", "terminated", "truncated", "policy_version"})


@dataclass(frozen=True)
class GroupWorkers:
    """``cat_results=0`` or ``-1``: a synchronous batch's workers, which TorchRL's layout stacks,
    one after the other along the first dim (``0``) or along time (``-1``). Along time, as in
    TorchRL, a preempted worker brings only the steps in which one of its envs collected a frame
    (its frames never collected, masked out in ``("collector", "mask")``, are left out)."""

    dim: int

    def __call__(self, batch: TensorDictBase, shape: BatchShape) -> TensorDictBase:
        if not shape.stacked:
            return batch
        mask = batch.get(("collector", "mask"), None) if self.dim == -1 else None
        preempted = mask is not None and not bool(mask.all())  # along time: each worker's collected steps
        viewable = not isinstance(batch, LazyStackedTensorDict) and not preempted
        out: TensorDictBase
        if viewable and (self.dim == 0 or batch.batch_dims == 2):  # [W, M, T] -> [W * M, T]: a view
            out = batch.reshape(-1, *batch.batch_size[2:])
        elif viewable and batch.batch_dims == 3:  # [W, M, T] -> [M, W * T]
            out = batch.transpose(0, 1).reshape(batch.batch_size[1], -1)
        else:  # workers' TensorDicts of other shapes, or cut to the steps they collected
            parts = [_collected_steps(part) if preempted else part for part in batch.unbind(0)]
            out = torch.cat(parts, 0 if self.dim == 0 or parts[0].batch_dims == 1 else -1)
        out.names = [None] * (out.batch_dims - 1) + ["time"]
        return out


def _collected_steps(part: TensorDictBase) -> TensorDictBase:
    """One worker's ``[M, T]`` (or ``[T]``) rows, cut to the steps in which one of its envs
    collected a frame."""
    mask = part.get(("collector", "mask"))
    collected = mask if mask.ndim == 1 else mask.reshape(-1, mask.shape[-1]).any(0)
    return part[..., collected]


@dataclass(frozen=True)
class WithoutTrajIds:
    """``track_traj_ids=False``: batches leave out ``("collector", "traj_ids")`` (the ids are
    still kept inside, for episode statistics)."""

    def __call__(self, batch: TensorDictBase, shape: BatchShape) -> TensorDictBase:
        out = batch.exclude(("collector", "traj_ids"))
        if out.get("collector", None) is not None and out.get("collector").is_empty():  # nothing left
            out = out.exclude("collector")
        return out


@dataclass(frozen=True)
class CompactObs:
    """``compact_obs=True``: drop the next observations (every ``("next", key)`` but the reward,
    the flags and the policy version): a frame's next observation is the following frame's
    observation, except at an episode's end."""

    def __call__(self, batch: TensorDictBase, shape: BatchShape) -> TensorDictBase:
        next_keys = batch.get("next").keys()  # noqa: SIM118 (iterating a TensorDict gives rows)
        return batch.exclude(*[("next", key) for key in next_keys if key not in _NEXT_KEPT])


@dataclass
class Translation:
    """What TorchRL's arguments of one call become.

    Attributes:
        layout: the ``layout`` option (TorchRL's layout object unless the call gave another).
        steps: batch steps (``batch_steps=``) after TorchRL's layout.
        writer: how batches reach the replay buffer (``replay_writer=``), if not rlcollect's way.
        num_threads: the torch threads of this process, set before the collector is built.
        worker_idx: the collector's place among another collector's workers.
        receivers: weight receivers registered once the collector is built.
    """

    layout: str | Layout = field(default_factory=TorchRLLayout)
    steps: list[BatchStep] = field(default_factory=list)
    writer: ReplayWriter | None = None
    num_threads: int | None = None
    worker_idx: int | None = None
    receivers: Mapping[str, Any] | None = None
    trust_policy: bool = False
    cudagraph_policy: bool = False

    def core_arguments(self) -> dict[str, Any]:
        """The core collector's arguments this translation adds."""
        arguments: dict[str, Any] = {"layout": self.layout}
        if self.steps:
            arguments["batch_steps"] = tuple(self.steps)
        if self.writer is not None:
            arguments["replay_writer"] = self.writer
        return arguments

    def apply(self, collector: Any) -> None:
        """What is set on ``collector`` once it is built."""
        if self.worker_idx is not None:  # this collector is worker ``worker_idx`` of another one
            collector.worker_idx = self.worker_idx
        if self.receivers is not None:
            collector.register_scheme_receiver(self.receivers)
        collector.trust_policy, collector.cudagraphed_policy = self.trust_policy, self.cudagraph_policy


@dataclass(frozen=True)
class WorkerInit:
    """TorchRL's ``init_fn`` of the collectors with workers (called with no argument first thing in
    each worker process) as rlcollect's ``worker_init_fn`` (called with the worker's index).

    Examples:
        >>> WorkerInit(lambda: print("worker starts"))(3)
        worker starts
    """

    init_fn: Callable[[], None]

    def __call__(self, worker_idx: int) -> None:
        self.init_fn()

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> None:
        """Replace TorchRL's ``init_fn`` in ``kwargs`` with ``worker_init_fn`` (checked)."""
        init_fn = check_callable("init_fn", kwargs.pop("init_fn", None))
        if init_fn is not None:
            kwargs["worker_init_fn"] = cls(init_fn)


def take_torchrl_arguments(kwargs: dict[str, Any]) -> Translation:
    """Remove TorchRL's own arguments (:data:`TORCHRL_ARGUMENTS`) from ``kwargs``: their
    translation (the other arguments ``layout``, ``split_trajs``, ``trajs_per_batch`` and
    ``replay_buffer`` are read, for the checks)."""
    given = {name: kwargs.pop(name) for name in TORCHRL_ARGUMENTS if name in kwargs}
    values = {**TORCHRL_ARGUMENTS, **given}
    _refuse_unsupported(values)
    layout = kwargs.pop("layout", "torchrl")
    tracked = check_flag("track_policy_version", values["track_policy_version"])
    translation = Translation(TorchRLLayout(track_policy_version=tracked) if layout == "torchrl" else layout)
    cat = values["cat_results"]
    if isinstance(cat, (bool, np.bool_)) or not (
            cat is None or cat == "stack" or (isinstance(cat, (int, np.integer)) and cat in (0, -1))):
        raise ValueError(f"cat_results={short_repr(cat)} is not one of {CAT_RESULTS} (how TorchRL's "
                         "layout groups a synchronous batch of several workers)")
    if cat not in (None, 0) and not isinstance(translation.layout, TorchRLLayout):
        raise ValueError(f"cat_results={cat!r} groups the workers' batches in TorchRL's layout: pass "
                         "layout='torchrl' (rlcollect's layout puts the workers' envs one after the "
                         "other along dim 0, which is cat_results=0)")
    if cat in (0, -1):
        translation.steps.append(GroupWorkers(int(cat)))
    regrouped = kwargs.get("split_trajs") or kwargs.get("trajs_per_batch") is not None
    if not check_flag("track_traj_ids", values["track_traj_ids"]):
        if regrouped:
            raise ValueError("track_traj_ids=False leaves out the trajectory ids that split_trajs and "
                             "trajs_per_batch group frames by: keep track_traj_ids=True")
        translation.steps.append(WithoutTrajIds())
    if check_flag("compact_obs", values["compact_obs"]):
        translation.steps.append(CompactObs())
    per_write = values["trajs_per_write"]
    if per_write is not None:
        per_write = check_int("trajs_per_write", per_write, minimum=1, allowed="a positive int or None")
        if kwargs.get("trajs_per_batch") is None or kwargs.get("replay_buffer") is None:
            raise ValueError("trajs_per_write groups the complete trajectories written to replay_buffer "
                             "under trajs_per_batch: give both (or leave trajs_per_write=None)")
    time_major = not check_flag("extend_buffer", values["extend_buffer"])
    if time_major or per_write is not None:
        translation.writer = ReplayWriter(time_major=time_major, trajectories_per_extend=per_write)
    for name, minimum in (("num_threads", 1), ("worker_idx", 0)):
        if values[name] is not None:
            setattr(translation, name, check_int(name, values[name], minimum=minimum,
                                                 allowed=f"an int >= {minimum} or None"))
    receivers = values["weight_recv_schemes"]
    if receivers is not None and not isinstance(receivers, Mapping):
        raise TypeError(f"weight_recv_schemes must be a dict {{model_id: scheme}} or None, got "
                        f"{type(receivers).__name__} {short_repr(receivers)}")
    translation.receivers = receivers
    translation.trust_policy = bool(values["trust_policy"])
    translation.cudagraph_policy = _cudagraph_policy(values["cudagraph_policy"])
    return translation


def _cudagraph_policy(value: Any) -> bool:
    """TorchRL's ``cudagraph_policy`` (True or CudaGraphModule's arguments): on a machine without
    CUDA TorchRL's CudaGraphModule runs the policy as it is, with a warning, and so does rlcollect;
    with CUDA it is refused (rlcollect does not capture CUDA graphs yet)."""
    if value is None or value is False:
        return False
    if not isinstance(value, (bool, Mapping)):
        raise TypeError(f"cudagraph_policy must be True, False or a dict of CudaGraphModule arguments, got "
                        f"{short_repr(value)} ({type(value).__name__})")
    if torch.cuda.is_available():
        raise ValueError(f"cudagraph_policy={short_repr(value)} is not supported with CUDA: rlcollect does "
                         "not capture the policy in CUDA graphs (compile_policy=True compiles it)")
    warnings.warn("cudagraph_policy: this machine has no CUDA device, so the policy runs as it is (as "
                  "TorchRL's CudaGraphModule does on such a machine)", UserWarning,
                  stacklevel=outside_stacklevel())
    return True


def _refuse_unsupported(values: dict[str, Any]) -> None:
    """TorchRL's arguments rlcollect accepts only at what it always does."""
    if check_int("num_sub_threads", values["num_sub_threads"], minimum=1, allowed="1") != 1:
        raise ValueError(f"num_sub_threads={values['num_sub_threads']} is not supported: each worker process "
                         "runs one torch thread (more workers use more cores)")
    if values["interruptor"] is not None:
        raise ValueError(f"interruptor={short_repr(values['interruptor'])} is not supported (TorchRL's "
                         "internal plumbing): preemptive_threshold= stops the slow workers")
    for name in ("use_buffers", "trust_policy", "no_cuda_sync"):  # TorchRL's internals: no effect here
        if values[name] is not None:
            check_flag(name, values[name])
    if not check_flag("reset_when_done", values["reset_when_done"]):
        raise ValueError("reset_when_done=False is not supported: rlcollect resets an env that is "
                         "done in the same step, always (see the batch rules)")
