"""What happens to a collected batch before the user (or the replay buffer) gets it.

One pipeline for every collector: copy (unless ``return_same_td``), regroup (``split_trajs``, or
``trajs_per_batch`` complete episodes), the layout (:mod:`rlcollect.data.formats`: the native one
or another), the batch steps (``batch_steps``), move to ``storing_device``, ``postproc``, the
post-collect hook, then either yield the batch or write it to the replay buffer (as its
:class:`ReplayWriter` says) and yield ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from tensordict import TensorDictBase

from rlcollect.data.formats import BatchShape, BatchStep, Layout, NativeLayout
from rlcollect.data.trajectories import TrajectoryAssembler, pad_trajectories, split_trajectories
from rlcollect.replay import flatten_batch

__all__ = ["Delivery", "ReplayWriter", "make_delivery"]


@dataclass(frozen=True)
class ReplayWriter:
    """How batches reach the replay buffer (the ``replay_writer`` option).

    Attributes:
        time_major: write each batch step by step (every env's frame of a step, then the next
            step's) instead of env by env.
        trajectories_per_extend: with ``trajs_per_batch``, the complete trajectories written per
            ``extend`` (``None``: all those a collected batch completed, in one).

    Examples:
        >>> ReplayWriter() == ReplayWriter(time_major=False)  # rlcollect's way
        True
    """

    time_major: bool = False
    trajectories_per_extend: int | None = None


@dataclass
class Delivery:
    """The per-batch pipeline; see the module docstring.

    Attributes:
        replay_buffer: anything with ``extend(TensorDict)``; batches are written flat
            (``[frames]``, env-major, padding dropped) and ``None`` is yielded.
        written_elsewhere: the workers already wrote the batch to the buffer: yield ``None``.
        trajs_per_batch: yield exactly this many complete episodes per batch
            (``traj_format="padded"``: ``[n, max_len]`` with a mask; ``"cat"``: ``[sum of lengths]``).
            With a replay buffer, as TorchRL: after each collected batch every episode it
            completed is written (flat), ``writer.trajectories_per_extend`` episodes per
            ``extend``, and one ``None`` is yielded.
        layout: how batches are laid out (:mod:`rlcollect.data.formats`).
        steps: the batch steps after the layout.
        writer: how batches reach the replay buffer.
        unbatched: each env has no batch size of its own (set by the collector once its env is
            built): in TorchRL's layout their batches are ``[T]``.
        workers: the workers whose rows a batch holds (set by synchronous multi-worker collectors).
        whole: a batch of several workers is their whole TensorDicts, stacked (set by the
            collectors whose workers send a TorchRL env's data back whole).
    """

    return_same_td: bool = False
    storing_device: torch.device | None = None
    split_trajs: bool = False
    postproc: Callable[[TensorDictBase], TensorDictBase] | None = None
    post_collect_hook: Callable[[TensorDictBase], None] | None = None
    replay_buffer: Any = None
    written_elsewhere: bool = False
    trajs_per_batch: int | None = None
    traj_format: Literal["padded", "cat"] = "padded"
    layout: Layout = field(default_factory=NativeLayout)
    steps: tuple[BatchStep, ...] = ()
    writer: ReplayWriter = ReplayWriter()
    unbatched: bool = False
    workers: int = 1
    whole: bool = False
    _assembler: TrajectoryAssembler = field(default_factory=TrajectoryAssembler, repr=False)

    def outputs(self, batch: TensorDictBase) -> Iterator[TensorDictBase | None]:
        """What the collector yields for one collected batch: zero, one or more items."""
        if self.written_elsewhere:
            yield None
            return
        if self.trajs_per_batch is not None:
            self._assembler.add(batch.clone())  # pieces outlive the collector's buffer
            if self.replay_buffer is not None:  # as TorchRL: written as they complete, one None per batch
                complete = self._assembler.pop_all()
                size = self.writer.trajectories_per_extend or max(len(complete), 1)
                for start in range(0, len(complete), size):
                    self._write(self.formatted(torch.cat(complete[start:start + size], 0)))
                yield None
                return
            while (trajectories := self._assembler.pop(self.trajs_per_batch)) is not None:
                if self.traj_format == "padded":
                    yield from self._finish(pad_trajectories(trajectories))
                else:
                    yield from self._finish(torch.cat(trajectories, 0))
            return
        if not self.return_same_td:
            batch = batch.clone()
        if self.split_trajs:
            batch = split_trajectories(batch)
        yield from self._finish(batch)

    def drop_pending(self) -> None:
        """Forget the trajectories held for ``trajs_per_batch`` (in flight or complete, not yet
        yielded): after the envs are reset, batches hold only what follows."""
        self._assembler.clear()

    def _finish(self, out: TensorDictBase) -> Iterator[TensorDictBase | None]:
        out = self.formatted(out)
        if self.replay_buffer is None:
            if self.post_collect_hook is not None:
                self.post_collect_hook(out)
            yield out
        else:
            self._write(out)
            yield None

    def _write(self, out: TensorDictBase) -> None:
        """The post-collect hook, then ``out`` (formatted) into the replay buffer."""
        if self.post_collect_hook is not None:
            self.post_collect_hook(out)
        self.replay_buffer.extend(self._for_buffer(out))

    def formatted(self, out: TensorDictBase) -> TensorDictBase:
        """``out`` as the user receives it: the layout, the keys left out, ``storing_device``,
        ``postproc`` (no hook, no replay buffer)."""
        out = self.laid_out(out, regrouped=self.split_trajs or self.trajs_per_batch is not None)
        if self.postproc is not None:
            out = self.postproc(out)
        return out

    def laid_out(self, out: TensorDictBase, regrouped: bool = False) -> TensorDictBase:
        """``out`` in the layout, less the keys left out, on ``storing_device``: a collected batch
        as ``Collector.rollout()`` returns it (``regrouped``: ``out`` holds whole trajectories)."""
        workers = 1 if regrouped else self.workers
        shape = BatchShape(workers, stacked=self.whole and workers > 1,
                           unbatched=self.unbatched and not regrouped)
        out, shape = self.layout.format(out, shape)
        for step in self.steps:
            out = step(out, shape)
        if self.storing_device is not None:
            out = out.to(self.storing_device)
        return out

    def _for_buffer(self, out: TensorDictBase) -> TensorDictBase:
        """What the replay buffer is extended with: flat frames, env by env (step by step with
        ``writer.time_major``); a TorchRL storage of ``ndim`` dims (``LazyTensorStorage(n, ndim=2)``)
        gets rows of the last ``ndim - 1`` dims (``[envs, T]``, the last dim named ``"time"``), as
        TorchRL's collectors extend it; the frames are on the storage's device where it has one."""
        storage = getattr(self.replay_buffer, "storage", None)
        device = getattr(storage, "device", None)
        if isinstance(device, torch.device) and out.device != device:
            out = out.to(device)
        storage_dims = int(getattr(storage, "ndim", 1))
        if storage_dims > 1 and out.batch_dims >= storage_dims:
            rows = out.reshape(-1, *out.batch_size[out.batch_dims - storage_dims + 1:])
            rows.names = [None] * (rows.batch_dims - 1) + ["time"]  # TorchRL's storage cycles along time
            return rows
        if self.writer.time_major and out.batch_dims == 2:
            out = out.transpose(0, 1)  # step by step: every env's frame of a step, then the next
        return flatten_batch(out)


@dataclass
class WorkerHook:
    """A post-collect hook run in a worker process on that worker's batch, as the user receives
    batches (the layout of ``delivery``, one worker's rows; no ``postproc``, no replay buffer)."""

    hook: Callable[[TensorDictBase], None]
    delivery: Delivery

    def __call__(self, batch: TensorDictBase) -> None:
        self.hook(self.delivery.formatted(batch))


def make_delivery(
    *,
    return_same_td: bool,
    storing_device: torch.device | None,
    split_trajs: bool,
    postproc: Callable[[TensorDictBase], TensorDictBase] | None,
    post_collect_hook: Callable[[TensorDictBase], None] | None,
    replay_buffer: Any,
    trajs_per_batch: int | None,
    traj_format: str | None,
    workers_write: bool = False,
    layout: Layout | None = None,
    steps: tuple[BatchStep, ...] = (),
    writer: ReplayWriter | None = None,
) -> Delivery:
    """Check the delivery arguments (one clear error each) and build the pipeline.

    ``workers_write``: the collector's workers can extend ``replay_buffer`` themselves (they do
    for batches written as collected: no regrouping, the native layout, no steps, env by env).
    """
    if replay_buffer is not None and not callable(getattr(replay_buffer, "extend", None)):
        raise TypeError(
            f"replay_buffer must have an extend(TensorDict) method (e.g. rlcollect.replay.ReplayBuffer), "
            f"got {type(replay_buffer).__name__} {replay_buffer!r:.80}"
        )
    if traj_format is not None and trajs_per_batch is None:
        raise ValueError(f"traj_format={traj_format!r} needs trajs_per_batch")
    if traj_format not in (None, "padded", "cat"):
        raise ValueError(f"traj_format must be 'padded' or 'cat', got {traj_format!r}")
    if split_trajs and trajs_per_batch is not None:
        raise ValueError("split_trajs and trajs_per_batch exclude each other: trajs_per_batch already "
                         "yields whole trajectories")
    layout = NativeLayout() if layout is None else layout
    writer = ReplayWriter() if writer is None else writer
    as_collected = isinstance(layout, NativeLayout) and not steps and writer == ReplayWriter()
    in_workers = workers_write and trajs_per_batch is None and as_collected
    return Delivery(
        return_same_td=return_same_td,
        storing_device=storing_device,
        split_trajs=split_trajs,
        postproc=postproc,
        post_collect_hook=post_collect_hook,
        replay_buffer=None if in_workers else replay_buffer,
        written_elsewhere=in_workers,
        trajs_per_batch=trajs_per_batch,
        traj_format="cat" if traj_format == "cat" else "padded",
        layout=layout,
        steps=steps,
        writer=writer,
    )
