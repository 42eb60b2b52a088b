"""Preallocated batch buffers: one tensor per key, ``[N, T, ...]``, written in place every step.

The buffers are allocated once per collector (in shared memory when workers write them). Env
adapters write observations, rewards and flags; policy adapters write actions and extras; the
rollout loop finishes each batch with a few vectorised copies. Observations live in one
``[N, T + 1, ...]`` tensor per key: slot ``t + 1`` receives the observation after step ``t`` (the
reset observation when the episode ended), so the policy reads slot ``t`` and slot ``T`` carries
over to the next batch. ``("next", obs)`` is filled at the end from slots ``1..T``, with the true
final observations put back where episodes ended.

Examples:
    >>> import torch
    >>> from rlcollect.data.layout import BatchLayout, Field
    >>> layout = BatchLayout((Field(("observation",), (4,), torch.float32),),
    ...                      Field(("action",), (), torch.int64))
    >>> buffers = BatchBuffers.allocate(layout, num_envs=2, num_steps=5)
    >>> buffers.batch.batch_size, buffers.batch["observation"].shape
    (torch.Size([2, 5]), torch.Size([2, 5, 4]))
    >>> buffers.obs_ext[("observation",)].shape  # one slot more: the next batch's first
    torch.Size([2, 6, 4])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.common.resources import check_shared_memory, cleaned_shared_memory, physical_memory
from rlcollect.data.layout import DONE_FLAGS, BatchLayout, Field, get_nested

__all__ = ["BatchBuffers", "copy_frames", "physical_memory"]

NestedKey = tuple[str, ...]


def _key(key: NestedKey) -> str | NestedKey:
    return key[0] if len(key) == 1 else key


#: Bytes of every frame besides observations, action and extras: reward (4), three flags (3),
#: trajectory id (8), policy version (8), mask (1).
FIXED_FRAME_BYTES = 24


def copy_frames(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for ``[N, T, ...]`` arrays, a frame (an ``[n, t]`` entry) at a time where
    each frame is one block: from the step-major observation slots, a fifth of the time of numpy's
    element-wise copy for small frames.

    Examples:
        >>> src = np.arange(24, dtype=np.float32).reshape(3, 2, 4).swapaxes(0, 1)  # [2, 3, 4], step-major
        >>> dst = np.zeros((2, 3, 4), np.float32)
        >>> copy_frames(dst, src)
        >>> bool((dst == src).all())
        True
    """
    frame = math.prod(src.shape[2:]) * src.itemsize
    if not dst.size or not frame or not (src[0, 0].flags.c_contiguous and dst[0, 0].flags.c_contiguous):
        dst[...] = src
        return
    unit, frames = np.dtype((np.void, frame)), dst.reshape(*dst.shape[:2], -1)  # (a view: checked above)
    assert np.may_share_memory(frames, dst)
    frames.view(unit)[...] = src.reshape(*src.shape[:2], -1).view(unit)


class BatchBuffers:
    """The tensors of one batch and their numpy views.

    Build with :meth:`allocate` (or :meth:`from_storage` over tensors allocated elsewhere, e.g. a
    worker's slice of a shared-memory batch).

    Attributes:
        storage: every tensor, batch size ``[N]``: ``"obs_ext"`` (``[N, T + 1, ...]`` per
            observation key) and ``"batch"`` (``[N, T, ...]``, the batch's own tensors).
        batch: the batch TensorDict ``[N, T]`` (views into ``storage``), dims ``[None, "time"]``.
        finals: ``(env, t, final_observation)`` for the episodes that ended in this batch.
    """

    def __init__(self, storage: TensorDict, layout: BatchLayout, num_steps: int) -> None:
        self.storage = storage
        self.layout = layout
        self.num_envs = int(storage.batch_size[0])
        self.num_steps = num_steps
        self.finals: list[tuple[int | np.ndarray, int, Any]] = []  # (env or envs, step, final obs)
        self.dict_obs = layout.dict_observations
        data = storage.get("batch")
        obs_ext = storage.get("obs_ext")
        self.obs_ext = {f.key: obs_ext.get(_key(f.key)) for f in layout.observations}
        self.next_obs = {f.key: data.get(("next", *f.key)) for f in layout.observations}
        self.action = data.get("action")
        self.extras = {f.key: data.get(_key(f.key)) for f in layout.extras}
        self.infos = {f.key[-1]: data.get(("next", "info", *f.key)) for f in layout.infos}
        self.reward = data.get(("next", "reward"))
        self.terminated = data.get(("next", "terminated"))
        self.truncated = data.get(("next", "truncated"))
        self.done = data.get(("next", "done"))
        self.traj_ids = data.get(("collector", "traj_ids"))
        self.policy_version = data.get("policy_version")
        self.mask: torch.Tensor | None = data.get(("collector", "mask"), None)
        self.mask_np = None if self.mask is None else self.mask.numpy()  # [N, T]: the real frames
        self.env_ids: torch.Tensor | None = data.get(("collector", "env_ids"), None)
        self.is_init: torch.Tensor | None = data.get("is_init", None)  # [N, T, 1]: an episode's first frame
        batch = data.clone(recurse=False)  # same tensors, own key set
        for key, tensor in self.obs_ext.items():
            batch.set(_key(key), tensor[:, :num_steps])
        batch.names = [None, "time"]
        self.batch: TensorDict = batch
        # numpy views for the per-step writes (numpy item writes are much cheaper than torch's)
        self.obs_ext_np = {k: v.numpy() for k, v in self.obs_ext.items()}
        self.next_obs_np = {k: v.numpy() for k, v in self.next_obs.items()}
        self.action_np = self.action.numpy()
        self.reward_np = self.reward.numpy()
        self.terminated_np = self.terminated.numpy()
        self.truncated_np = self.truncated.numpy()
        self.done_np = self.done.numpy()
        self.traj_ids_np = self.traj_ids.numpy()
        self.infos_np = {key: value.numpy() for key, value in self.infos.items()}  # [N, T, ...] each

    @staticmethod
    def allocate_storage(
        layout: BatchLayout, num_envs: int, num_steps: int, *, shared: bool = False, masked: bool = False
    ) -> TensorDict:
        """Zero-filled storage for ``num_envs`` x ``num_steps`` frames.

        ``shared`` puts it in shared memory (for workers); ``masked`` adds ``("collector", "mask")``
        for batches whose collection may stop early (preemption), as ``layout.masked`` does.
        """
        n, t = num_envs, num_steps
        need, memory = BatchBuffers.nbytes(layout, n, t), physical_memory()
        if need > memory:  # named here, not by the allocator
            raise ValueError(
                f"frames_per_batch: a batch of {n} envs x {t} steps ({n * t} frames) of "
                f"{need // (n * (t + 1))} bytes each needs {need / 2**30:.1f} GiB, more than this "
                f"machine's {memory / 2**30:.1f} GiB: lower frames_per_batch (or the number of envs)"
            )

        def zeros(field: Field, steps: int) -> torch.Tensor:
            return torch.zeros((n, steps, *field.shape), dtype=field.dtype)

        data = TensorDict(batch_size=[n, t])
        obs_ext = TensorDict(batch_size=[n, t + 1])
        for field in layout.observations:
            # [N, T + 1, ...] laid out step by step: each slot's observations one block, which the
            # policy reads and the envs write at every step (a thousand envs' strided rows cost 3 %)
            slots = torch.zeros((t + 1, n, *field.shape), dtype=field.dtype).transpose(0, 1)
            obs_ext.set(_key(field.key), slots)
            data.set(("next", *field.key), zeros(field, t))
        data.set("action", zeros(layout.action, t))
        for field in layout.extras:
            data.set(_key(field.key), zeros(field, t))
        for field in layout.infos:
            data.set(("next", "info", *field.key), zeros(field, t))
        data.set(("next", "reward"), torch.zeros(n, t, 1, dtype=torch.float32))
        for flag in DONE_FLAGS:
            data.set(("next", flag), torch.zeros(n, t, 1, dtype=torch.bool))
        data.set(("collector", "traj_ids"), torch.zeros(n, t, dtype=torch.int64))
        data.set("policy_version", torch.zeros(n, t, dtype=torch.int64))
        if masked or layout.masked:
            data.set(("collector", "mask"), torch.ones(n, t, dtype=torch.bool))
        if layout.env_ids:
            data.set(("collector", "env_ids"), torch.zeros(n, t, dtype=torch.int64))
        if layout.is_init:
            data.set("is_init", torch.zeros(n, t, 1, dtype=torch.bool))
        storage = TensorDict({"batch": data, "obs_ext": obs_ext}, batch_size=[n])
        if shared:
            with cleaned_shared_memory():
                storage.share_memory_()
        return storage

    @staticmethod
    def nbytes(layout: BatchLayout, num_envs: int, num_steps: int) -> int:
        """About the bytes :meth:`allocate_storage` takes for ``num_envs`` x ``num_steps`` frames."""
        fields = (*layout.observations, *layout.observations, layout.action, *layout.extras, *layout.infos)
        frame_bytes = sum(math.prod(f.shape) * f.dtype.itemsize for f in fields) + FIXED_FRAME_BYTES
        return num_envs * (num_steps + 1) * frame_bytes

    @staticmethod
    def misfit(storage: TensorDict, layout: BatchLayout) -> str:
        """How ``layout``'s observations and action do not fit ``storage`` (allocated for another
        layout), or ``""``: e.g. ``"observation: [6] float32 where the batch holds [4] float32"``."""
        fields = [(("obs_ext", *f.key), f) for f in layout.observations]
        fields.append((("batch", "action"), layout.action))
        for key, field in fields:
            held = storage.get(key, None)
            shape = list(field.shape)
            if held is None or list(held.shape[2:]) != shape or held.dtype != field.dtype:
                holds = "no such entry" if held is None else f"{list(held.shape[2:])} {held.dtype}"
                return f"{'.'.join(key[1:])}: {shape} {field.dtype} where the batch holds {holds}"
        return ""

    @classmethod
    def allocate(
        cls, layout: BatchLayout, num_envs: int, num_steps: int, *, shared: bool = False, masked: bool = False
    ) -> BatchBuffers:
        """Allocate and wrap new storage (see :meth:`allocate_storage`)."""
        storage = cls.allocate_storage(layout, num_envs, num_steps, shared=shared, masked=masked)
        return cls(storage, layout, num_steps)

    @classmethod
    def allocate_slots(cls, count: int, layout: BatchLayout, num_envs: int, num_steps: int, *,
                       shared: bool, masked: bool = False) -> list[BatchBuffers]:
        """``count`` slots as :meth:`allocate` makes one; shared ones only once ``/dev/shm`` is
        known to hold all of them (checked here, not by torch's allocator, whose error names no
        argument)."""
        if shared:
            check_shared_memory(count * cls.nbytes(layout, num_envs, num_steps),
                                f"{count} batch slot(s) of {num_envs} envs x {num_steps} steps",
                                "frames_per_batch (or the number of envs)")
        return [cls.allocate(layout, num_envs, num_steps, shared=shared, masked=masked) for _ in range(count)]

    def frames(self, steps: int) -> int:
        """The transitions in the batch's first ``steps`` steps: every frame, but an env's own
        reset steps (masked out where ``layout.masked``)."""
        if self.layout.masked and self.mask_np is not None:
            return int(np.count_nonzero(self.mask_np[:, :steps]))
        return steps * self.num_envs

    def write_obs(self, env: int, slot: int, obs: Any) -> None:
        """Write one env's (possibly Dict) observation into observation slot ``slot``."""
        for key, array in self.obs_ext_np.items():
            array[env, slot] = get_nested(obs, key) if self.dict_obs else obs

    def write_obs_all(self, slot: int, obs: Any) -> None:
        """Write all envs' batched observation (array, or dict of arrays) into slot ``slot``."""
        for key, array in self.obs_ext_np.items():
            array[:, slot] = get_nested(obs, key) if self.dict_obs else obs

    def write_next_obs(self, steps: int) -> None:
        """Fill ``("next", obs)[:, :steps]`` from observation slots ``1`` to ``steps`` (the reset
        observations where an episode ended, which the :attr:`finals` then overwrite)."""
        for key, next_obs in self.next_obs_np.items():
            copy_frames(next_obs[:, :steps], self.obs_ext_np[key][:, 1 : steps + 1])

    def write_final_obs(self, env: int | np.ndarray, t: int, obs: Any) -> None:
        """Write a true final observation into ``("next", obs)[env, t]`` (or those of the envs
        ``env``, an index array, from ``[len(env), ...]`` arrays)."""
        for key, array in self.next_obs_np.items():
            array[env, t] = get_nested(obs, key) if self.dict_obs else obs
