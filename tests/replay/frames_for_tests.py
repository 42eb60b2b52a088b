"""Batches whose every field tells where the frame came from, and process targets for the replay tests.

A frame's *code* is ``writer * 100_000 + env * 10_000 + step``. Every field of the frame holds that
code (observations in all their entries), so a frame assembled from two different writes (torn) has
fields that disagree, and the code says which (writer, env, step) wrote it. Codes stay below 2**24,
so float32 fields hold them exactly. Each (writer, env) is one trajectory (``traj_ids = writer * 10
+ env``) unless ``done_every`` ends episodes.

The process targets live here (not in the test modules) so that spawned children import only this
small module.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rlcollect.replay import ReplayBuffer

NUM_ENVS, STEPS, OBS_SIZE = 2, 16, 64  # the concurrent writers' batches


def make_batch(
    writer: int, num_envs: int, t0: int, steps: int, obs_size: int = 4, done_every: int = 0
) -> TensorDict:
    """A collector-like batch ``[num_envs, steps]`` of frames ``t0 .. t0 + steps`` of each env."""
    env = torch.arange(num_envs).view(-1, 1)
    step = t0 + torch.arange(steps).view(1, -1)
    code = (writer * 100_000 + env * 10_000 + step).expand(num_envs, steps)  # [N, T]
    fcode = code.to(torch.float32)
    done = (
        ((step + 1) % done_every == 0).expand(num_envs, steps).unsqueeze(-1)
        if done_every
        else torch.zeros(num_envs, steps, 1, dtype=torch.bool)
    )
    return TensorDict(
        {
            "observation": fcode.unsqueeze(-1).expand(num_envs, steps, obs_size).clone(),
            "action": code.clone(),
            "policy_version": code.clone(),
            ("next", "observation"): fcode.unsqueeze(-1).expand(num_envs, steps, obs_size).clone(),
            ("next", "reward"): fcode.unsqueeze(-1).clone(),
            ("next", "done"): done,
            ("next", "terminated"): done.clone(),
            ("next", "truncated"): torch.zeros(num_envs, steps, 1, dtype=torch.bool),
            ("collector", "traj_ids"): (writer * 10 + env).expand(num_envs, steps).clone(),
        },
        batch_size=[num_envs, steps],
        names=[None, "time"],
    )


def torn_rows(frames: TensorDict) -> torch.Tensor:
    """Bool ``[n]``: frames whose fields do not all hold the same code."""
    code = frames["action"]
    ok = (frames["policy_version"] == code)
    for key in ("observation", ("next", "observation"), ("next", "reward")):
        ok &= (frames[key] == code.to(torch.float32).unsqueeze(-1)).all(-1)
    return ~ok


def write_concurrently(
    bigs: list[ReplayBuffer], smalls: list[ReplayBuffer], writer: int, num_batches: int, stop: Any
) -> None:
    """Process target: the same batches into every buffer, then into ``smalls`` only until ``stop``.

    Batches are ``[2 envs, 16 steps]`` with 64-float observations (copies long enough to interleave
    with the other processes'). ``stop`` is a multiprocessing event; the target gives up on it after
    60 s.
    """
    torch.set_num_threads(1)
    for b in range(num_batches):
        batch = make_batch(writer, NUM_ENVS, b * STEPS, STEPS, OBS_SIZE)
        for buffer in bigs + smalls:
            buffer.extend(batch)
    b, give_up = num_batches, time.monotonic() + 60
    while not stop.is_set() and time.monotonic() < give_up:
        batch = make_batch(writer, NUM_ENVS, b * STEPS, STEPS, OBS_SIZE)
        for buffer in smalls:
            buffer.extend(batch)
        b += 1


def write_memmap_and_exit(path: str, capacity: int, num_batches: int) -> None:
    """Process target: open a memmap buffer at ``path``, write batches of writer 7, exit."""
    buffer = ReplayBuffer(capacity, storage="memmap", path=Path(path))
    for b in range(num_batches):
        buffer.extend(make_batch(7, 2, b * 5, 5, done_every=3))
    time.sleep(0.01)


def flat_frames(writer: int, steps: int = 8) -> TensorDict:
    """``steps`` flat frames ``[steps]`` of one env of ``writer`` (codes ``writer * 100_000 + step``)."""
    return make_batch(writer, 1, 0, steps).reshape(-1)


def die_inside_a_write(buffer: ReplayBuffer, stalled: Any) -> None:
    """Process target: commit the frames of writer 1, then stop inside the copy of writer 2's frames.

    The copy stops after the first field of writer 2's frames has reached the buffer (a torn write),
    sets the multiprocessing event ``stalled`` and sleeps until the test kills the process.
    """
    buffer.extend(flat_frames(1))
    copy = torch.Tensor.copy_

    def copy_then_stall(dst: torch.Tensor, src: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = copy(dst, src, *args, **kwargs)
        if src.dtype != torch.bool and src.numel() and float(src.reshape(-1)[0]) >= 200_000:
            stalled.set()
            time.sleep(600)
        return out

    torch.Tensor.copy_ = copy_then_stall  # type: ignore[method-assign]
    buffer.extend(flat_frames(2))


def die_holding_the_lock(buffer: ReplayBuffer, holding: Any) -> None:
    """Process target: commit the frames of writer 1, then take the buffer's lock and sleep until killed."""
    buffer.extend(flat_frames(1))
    with buffer._storage._lock:
        holding.set()
        time.sleep(600)


def extend_and_own_a_buffer(buffer: ReplayBuffer, report: str) -> None:
    """Process target: extend ``buffer`` with writer 5's frames, lay out a shared buffer of its own,
    write its lock file's path to the file ``report`` and exit (without closing it)."""
    buffer.extend(flat_frames(5))
    own = ReplayBuffer(8, storage="shared")
    own.extend(flat_frames(6))
    Path(report).write_text(str(own._storage._lock.path))


def own_a_buffer_and_die(report: str) -> None:
    """Process target: lay out a shared buffer, write its lock file's path to ``report``, then SIGKILL
    itself (no exit handler runs)."""
    own = ReplayBuffer(8, storage="shared")
    Path(report).write_text(str(own._storage._lock.path))
    os.kill(os.getpid(), signal.SIGKILL)


def extend_and_signal(buffer: ReplayBuffer, writer: int, done: Any) -> None:
    """Process target: extend ``buffer`` with ``flat_frames(writer)``, then set the event ``done``."""
    buffer.extend(flat_frames(writer))
    done.set()
