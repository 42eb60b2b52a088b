"""What a ``rlcollect collect`` run will be before it starts: its batch size, its env's spaces, and
the bytes it will write (with a warning when they are many, or more than the disk has free).

Examples:
    >>> default_frames_per_batch(100_000, 8)
    1024
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tensordict import NestedKey, TensorDictBase

from rlcollect.cli.errors import CliError, one_line

__all__ = ["DEFAULT_STEPS_PER_BATCH", "SIZE_WARNING_BYTES", "default_frames_per_batch", "env_spaces",
           "estimated_bytes", "folder_bytes", "size_text", "warn_about_size"]

#: Steps per env in a batch when ``--frames-per-batch`` is not given.
DEFAULT_STEPS_PER_BATCH = 128
#: A run estimated to take more than this (bytes) is warned about before its first batch is written.
SIZE_WARNING_BYTES = 10 * 10**9


def default_frames_per_batch(frames: int, num_envs: int) -> int:
    """Without ``--frames-per-batch``: ``DEFAULT_STEPS_PER_BATCH`` steps of every env, or all ``frames``.

    Examples:
        >>> default_frames_per_batch(100_000, 8), default_frames_per_batch(100, 8)
        (1024, 100)
    """
    return min(DEFAULT_STEPS_PER_BATCH * num_envs, frames)


def env_spaces(env_id: str, kwargs: dict[str, Any]) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The observation and action spaces of one ``env_id`` env (made and closed again), built as the
    collectors build it: ``ALE/...`` ids register ale-py's envs, ``envpool:...`` ids make a pool."""
    from rlcollect.envs.base import EnvBatch
    from rlcollect.envs.envpool_env import ENVPOOL_PREFIX
    from rlcollect.envs.factory import make_env_batch

    if env_id.startswith(ENVPOOL_PREFIX):  # one env's pool: its spaces do not depend on batch_size
        kwargs = {key: value for key, value in kwargs.items() if key != "batch_size"}
    try:
        envs = make_env_batch(env_id, 1, kwargs)
    except gym.error.Error as error:
        raise CliError(
            f"--env {env_id!r} is not a registered Gymnasium env id ({one_line(str(error))})"
        ) from None
    except ValueError as error:  # an unknown id, or a package it needs is missing: named there
        text = one_line(str(error)).removeprefix(f"create_env_fn={env_id!r}").lstrip(": ")
        joint = " " if text.startswith(("is ", "needs ")) else ": "
        raise CliError(f"--env {env_id!r}{joint}{text}") from None
    except Exception as error:  # the env's own module failed: still a bad --env for this machine
        with_kwargs = f" with --env-kwargs {_kwargs_text(kwargs)}" if kwargs else ""
        raise CliError(
            f"--env {env_id!r} cannot be made{with_kwargs} ({type(error).__name__}: {one_line(str(error))})"
        ) from None
    try:
        if not isinstance(envs, EnvBatch):  # an env id never makes a TorchRL env
            raise CliError(f"--env {env_id!r} made a TorchRL env; the CLI collects Gymnasium envs")
        return envs.observation_space, envs.action_space
    finally:
        envs.close()


def _kwargs_text(kwargs: dict[str, Any]) -> str:
    return " ".join(f"{key}={value!r}" for key, value in kwargs.items())


def estimated_bytes(
    batch: TensorDictBase, num_batches: int, *, left_out: Sequence[NestedKey] = ()
) -> int:
    """What ``num_batches`` batches like ``batch`` (``[envs, T]``) take in a run folder: every
    entry's bytes, less the ``left_out`` entries but for their last step (what ``--no-next-obs``
    keeps of them).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"observation": torch.zeros(2, 8, 4), "next": {"observation":
        ...     torch.zeros(2, 8, 4), "reward": torch.zeros(2, 8, 1)}}, batch_size=[2, 8])
        >>> estimated_bytes(batch, 10), estimated_bytes(batch, 10, left_out=[("next", "observation")])
        (5760, 3520)
    """
    def size(tensor: torch.Tensor) -> int:
        return tensor.numel() * tensor.element_size()

    total = sum(size(value) for value in batch.values(include_nested=True, leaves_only=True))
    for key in left_out:  # [envs, T, ...]: the last step is kept
        total -= size(batch.get(key)) - size(batch.get(key)[:, -1])
    return total * num_batches


def warn_about_size(
    batch: TensorDictBase, num_batches: int, out: Path, next_obs: bool,
    observation_keys: list[tuple[str, ...]],
) -> None:
    """A warning on stderr, before the first batch is written, when the run will take more than
    ``SIZE_WARNING_BYTES`` or more than the free space of ``out``'s disk."""
    left_out = [] if next_obs else [("next", *key) for key in observation_keys]
    size = estimated_bytes(batch, num_batches, left_out=left_out)
    free = shutil.disk_usage(out).free
    if size <= SIZE_WARNING_BYTES and size <= free:
        return
    hint = "; --no-next-obs about halves it for pixel observations" if next_obs else ""
    room = f"more than the {size_text(free)} free there" if size > free else f"{size_text(free)} free there"
    print(f"rlcollect: warning: this run will write about {size_text(size)} to {out} ({room}){hint}; "
          "Ctrl-C stops it with the batches written so far kept", file=sys.stderr)


def size_text(size: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
