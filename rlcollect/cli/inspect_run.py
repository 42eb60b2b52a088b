"""``rlcollect inspect PATH``: what a run folder holds (layout, frames, episodes, how it was made).

Examples:
    >>> import tempfile
    >>> from rlcollect.cli.collect import CollectOptions, run_collect
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     out = folder + "/run"
    ...     _ = run_collect(CollectOptions(out=out, frames=64, num_envs=2, seed=0, progress=False))
    ...     print(describe_run(out))  # doctest: +ELLIPSIS
    /.../run: 64 frames, batch_size [1, 2, 32] (batches, envs, time)
    key                    shape          dtype
    action                 [1, 2, 32]     torch.int64
    ...
    next.reward            [1, 2, 32, 1]  torch.float32
    ...
    episodes: ... ended (... terminated, ... truncated), mean return ...
    made by:  rlcollect collect --env CartPole-v1 --frames 64 --num-envs 2 --workers 1 --seed 0 ... (complete)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensordict import TensorDictBase

from rlcollect.cli.episodes import EpisodeTally
from rlcollect.cli.output import load_run

__all__ = ["describe_run"]


def _leaf_rows(stored: TensorDictBase) -> list[tuple[str, str, str]]:
    rows = []
    for key in stored.keys(include_nested=True, leaves_only=True):
        tensor = stored.get(key)
        name = key if isinstance(key, str) else ".".join(key)  # nested keys joined with "."
        rows.append((name, str(list(tensor.shape)), str(tensor.dtype)))
    return sorted(rows)


def _made_by(info: dict[str, Any]) -> str:
    """The command that made the run (as typed; rebuilt for a run.json older than that record)."""
    command = info.get("command") or _rebuilt(info)
    written, planned = info.get("batches_written"), info.get("batches_planned")
    state = "complete" if info.get("complete") else f"INTERRUPTED: {written} of {planned} batches written"
    return f"{command} ({state})"


def _rebuilt(info: dict[str, Any]) -> str:
    command = f"rlcollect collect --env {info.get('env')} --num-envs {info.get('num_envs')}"
    if info.get("env_kwargs"):
        command += " --env-kwargs " + " ".join(f"{key}={value}" for key, value in info["env_kwargs"].items())
    command += f" --frames-per-batch {info.get('frames_per_batch')}"
    if info.get("seed") is not None:
        command += f" --seed {info['seed']}"
    if info.get("policy"):
        command += f" --policy {info['policy']}"
    if info.get("next_obs", "stored") != "stored":
        command += " --no-next-obs"
    return command


def describe_run(path: str | Path) -> str:
    """The text ``rlcollect inspect`` prints for the run folder ``path``.

    Raises:
        CliError: ``path`` is not a saved TensorDict folder.
    """
    stored, info = load_run(path)
    dims = " (batches, envs, time)" if info and stored.batch_dims == 3 else ""
    lines = [f"{path}: {stored.numel():,} frames, batch_size {list(stored.batch_size)}{dims}"]
    rows = [("key", "shape", "dtype"), *_leaf_rows(stored)]
    widths = [max(len(row[i]) for row in rows) + 2 for i in range(2)]
    lines += [f"{name:<{widths[0]}}{shape:<{widths[1]}}{dtype}" for name, shape, dtype in rows]
    episodes = EpisodeTally.of(stored)
    if episodes is not None:
        lines.append(f"episodes: {episodes.describe()}")
    if info.get("next_obs", "stored") != "stored":
        lines.append(f"next observations: {info['next_obs']} (rlcollect.load_run)")
    if info:
        lines.append(f"made by:  {_made_by(info)}")
    return "\n".join(lines)
