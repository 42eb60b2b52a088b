"""``rlcollect export RUN --format minari``: a run folder's episodes as a Minari dataset.

A run ``[batches, envs, T]`` holds each env's steps in order along ``(batch, T)``; an episode is
the steps of one trajectory id, from its first step to the one where ``("next", "done")`` is set.
Each episode that ended in the run becomes one Minari episode, in the order of the trajectory
ids (the order the episodes began): ``observations`` are its steps' observations plus the final
one (``T + 1``), ``actions``, ``rewards``, ``terminations``, ``truncations`` its steps'. The
episodes still running when the run stopped have no end and are left out (the summary says how
many). Observations are stored losslessly (Minari's JPEG encoding of images is turned off), in
Minari's HDF5 format (its Arrow format writes a folder per episode and sums their sizes after
each one: minutes for thousands of episodes).

The export streams: the run's done flags and trajectory ids are read first (a few bytes a frame),
then each episode's steps straight from the folder's files (:class:`~rlcollect.data.run_reader.RunReader`),
handed to Minari and freed before the next, so its memory stays within tens of MB above the
interpreter's however large the run (measured: 28 MB for a 41 MB run of 84x84x4 frames, 45 MB
for a 165 MB one; the whole run in memory before). An asynchronous EnvPool's run, whose rows
are regrouped by env first, is the exception: it is read into memory.

The dataset goes where ``minari.load_dataset`` looks: ``$MINARI_DATASETS_PATH`` or
``~/.minari/datasets``. Minari is an optional extra (``pip install rlcollect[minari]``), imported
when a dataset is written.

Examples:
    >>> import os, tempfile
    >>> from rlcollect.cli.collect import CollectOptions, run_collect
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     os.environ["MINARI_DATASETS_PATH"] = folder + "/datasets"
    ...     _ = run_collect(CollectOptions(out=folder + "/run", frames=512, num_envs=2, seed=0,
    ...                                    progress=False))
    ...     summary = export_minari(folder + "/run", "rlcollect/cartpole-random-v0")
    ...     import minari
    ...     dataset = minari.load_dataset("rlcollect/cartpole-random-v0")
    ...     print(dataset.total_episodes == summary.episodes, summary.frames + summary.left_out <= 512)
    True True
"""

from __future__ import annotations

import ast
import ctypes
import itertools
import math
import shutil
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.cli.errors import CliError, one_line
from rlcollect.cli.output import load_run, read_info
from rlcollect.data.layout import observation_fields, stored_observation_space
from rlcollect.data.run_reader import RunReader
from rlcollect.data.trajectories import pad_trajectories

Key = tuple[str, ...]

try:  # glibc's malloc_trim, where there is one
    _LIBC: Any = ctypes.CDLL("libc.so.6") if sys.platform.startswith("linux") else None
    _LIBC = _LIBC if _LIBC is not None and hasattr(_LIBC, "malloc_trim") else None
except OSError:
    _LIBC = None

__all__ = ["ExportSummary", "check_dataset_id", "export_minari", "format_export", "run_episodes"]


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote.

    Attributes:
        dataset_id: the Minari dataset id.
        path: the dataset's folder.
        episodes: episodes written (every episode that ended in the run).
        frames: steps in them.
        left_out: steps of the episodes still running when the run stopped.
    """

    dataset_id: str
    path: Path
    episodes: int
    frames: int
    left_out: int


class _InMemory:
    """A run ``[batches, envs, T]`` held in memory, read as a :class:`RunReader` is."""

    def __init__(self, run: TensorDictBase) -> None:
        self.run = run
        self.batch_size = tuple(run.batch_size)

    def read(self, key: Key, batch: int, env: int, start: int, stop: int) -> torch.Tensor:
        return cast(torch.Tensor, self.run.get(key)[batch, env, start:stop])

    def column(self, key: Key) -> torch.Tensor:
        return cast(torch.Tensor, self.run.get(key))

    def leaves(self) -> set[Key]:
        return {key if isinstance(key, tuple) else (key,) for key in self.run.keys(True, True)}

    def next_observation(self, key: Key, batch: int, env: int, step: int) -> torch.Tensor:
        return cast(torch.Tensor, self.run.get(("next", *key))[batch, env, step])


def run_episodes(run: TensorDictBase | RunReader, observation_keys: list[Key]) -> Iterator[dict[str, Any]]:
    """The episodes that ended in ``run`` (``[batches, envs, T]``, in memory or read from its folder
    a few rows at a time), one by one in trajectory-id order, each a dict of numpy arrays:
    ``observations`` (an array, or a dict of them by key, ``T + 1`` steps), ``actions``,
    ``rewards``, ``terminations``, ``truncations`` and ``trajectory_id``."""
    rows = run if isinstance(run, RunReader) else _InMemory(_steps_of_each_env(run))
    batches, num_envs, steps = rows.batch_size

    def by_env(key: Key) -> torch.Tensor:  # [envs, batches x T]: each env's steps in order
        return rows.column(key).reshape(batches, num_envs, steps).transpose(0, 1).reshape(num_envs, -1)

    envs, ends = by_env(("next", "done")).bool().nonzero(as_tuple=True)  # by env, then time
    starts = torch.zeros_like(ends)
    starts[1:] = torch.where(envs[1:] == envs[:-1], ends[:-1] + 1, 0)
    if ("collector", "mask") in rows.leaves():  # a vector env's own reset step after an end: not a step
        starts += ~by_env(("collector", "mask")).bool()[envs, starts]
    traj_ids = by_env(("collector", "traj_ids"))[envs, ends]
    for i in torch.argsort(traj_ids).tolist():  # one read per leaf and batch per episode
        env, start, stop = int(envs[i]), int(starts[i]), int(ends[i]) + 1
        yield _episode(rows, observation_keys, env, start, stop, int(traj_ids[i]))


def _episode(rows: RunReader | _InMemory, observation_keys: list[Key], env: int, start: int, stop: int,
             trajectory_id: int) -> dict[str, Any]:
    """The steps ``start:stop`` of env ``env`` (counted along its batches), as one episode."""
    steps = rows.batch_size[2]

    def steps_of(key: Key) -> np.ndarray:
        return torch.cat([rows.read(key, b, env, max(start - b * steps, 0), min(stop - b * steps, steps))
                          for b in range(start // steps, (stop - 1) // steps + 1)]).numpy()

    last_batch, last_step = divmod(stop - 1, steps)
    obs = {key: np.concatenate([steps_of(key),
                                rows.next_observation(key, last_batch, env, last_step)[None].numpy()])
           for key in observation_keys}
    actions, rewards = steps_of(("action",)), steps_of(("next", "reward")).reshape(stop - start)
    arrays: list[tuple[str, np.ndarray]] = [("rewards", rewards), ("actions", actions),
                                            *((f"observations {'.'.join(k)}", v) for k, v in obs.items())]
    for name, values in arrays:
        if values.dtype.kind in "fc" and not np.isfinite(values).all():
            step = int(np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))[0])
            raise NotFinite(f"the {name} of trajectory {trajectory_id} (env {env}, its step {step}) are "
                            f"{values[step].tolist()}: not finite; a dataset holds finite values only (this "
                            "folder was damaged or written by other code: a collector stores none)")
    return {
        "observations": obs[("observation",)] if observation_keys == [("observation",)] else obs,
        "actions": actions,
        "rewards": rewards,
        "terminations": steps_of(("next", "terminated")).reshape(stop - start),
        "truncations": steps_of(("next", "truncated")).reshape(stop - start),
        "trajectory_id": trajectory_id,
    }


class NotFinite(ValueError):
    """An episode of a run folder holds a value that is not finite."""


def _steps_of_each_env(run: TensorDictBase) -> TensorDictBase:
    """``run`` (``[batches, rows, T]``) with envs as rows: as it is, except the run of an
    asynchronous EnvPool, whose frames (in the order they completed, ``("collector", "env_ids")``
    naming each one's env) are regrouped by env, ``[1, envs, steps]``, zero-padded where an env
    has fewer."""
    if ("collector", "env_ids") not in run.keys(True):
        return run
    frames = run.reshape(-1)  # batch after batch, row after row: the order they completed
    env_ids = frames.get(("collector", "env_ids"))
    order = torch.argsort(env_ids, stable=True)
    counts = torch.unique_consecutive(env_ids[order], return_counts=True)[1].tolist()
    return pad_trajectories(list(frames[order].split(counts))).exclude(("collector", "mask")).unsqueeze(0)


def _nested(obs: dict[tuple[str, ...], np.ndarray]) -> dict[str, Any]:
    """``{("a", "b"): x}`` as ``{"a": {"b": x}}`` (a Dict space's layout)."""
    out: dict[str, Any] = {}
    for key, value in obs.items():
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return out


def _spaces(info: dict[str, Any]) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The run's observation space (in its stored dtype) and action space, from ``run.json``."""
    from rlcollect.cli.planning import env_spaces  # the collectors' way to make the env

    env = info.get("env")
    if not isinstance(env, str):
        raise CliError("the run's run.json names no env: the Minari dataset needs its spaces")
    kwargs = {}
    for key, text in (info.get("env_kwargs") or {}).items():
        try:
            kwargs[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            kwargs[key] = text
    observation_space, action_space = env_spaces(env, kwargs)
    if info.get("obs_dtype"):
        observation_space = stored_observation_space(observation_space, getattr(torch, info["obs_dtype"]))
    return observation_space, action_space


def export_minari(run_path: str | Path, dataset_id: str, *, force: bool = False) -> ExportSummary:
    """Write the episodes of the run folder ``run_path`` as the Minari dataset ``dataset_id``.

    Raises:
        CliError: minari is not installed, the dataset exists (without ``force``), the id is not
            a Minari id, or the folder is not a run.
    """
    path = check_dataset_id(dataset_id, force=force)
    import minari
    from minari.data_collector import EpisodeBuffer

    run, info = _open(run_path)
    observation_space, action_space = _spaces(info)
    keys = [field.key for field in observation_fields(observation_space)]
    episodes = run_episodes(run, keys)
    try:
        first = next(episodes, None)
    except NotFinite as error:
        raise CliError(f"{str(run_path)!r}: {error}") from None
    if first is None:
        raise CliError(f"{str(run_path)!r} holds no episode that ended: a Minari dataset needs whole "
                       "episodes (collect more --frames)")
    if path.exists():  # checked free above; with force, the old dataset goes now
        shutil.rmtree(path)
    written = [0, 0]  # episodes, steps: counted as Minari takes them, one at a time

    def buffers() -> Iterator[Any]:
        for i, episode in enumerate(itertools.chain([first], episodes)):
            _give_back_memory()  # the episode Minari wrote last is freed
            written[0], written[1] = i + 1, written[1] + len(episode["rewards"])
            observations = episode["observations"]
            yield EpisodeBuffer(id=i, observations=_nested(observations) if isinstance(observations, dict)
                                else observations, actions=episode["actions"], rewards=episode["rewards"],
                                terminations=episode["terminations"], truncations=episode["truncations"])

    env = info.get("env", "")
    spec = gym.spec(env) if env in gym.registry else None
    with warnings.catch_warnings():  # Minari's advice on metadata (author, code link) is not ours
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        try:
            minari.create_dataset_from_buffers(
                dataset_id, buffers(), observation_space=observation_space,
                action_space=action_space, env=spec, data_format="hdf5", jpeg_encoding=False,
                algorithm_name=f"rlcollect collect --policy {info.get('policy') or 'random'}",
                description=f"{env} collected by rlcollect {info.get('rlcollect_version', '')}",
            )
        except NotFinite as error:  # no half-written dataset is left
            shutil.rmtree(path, ignore_errors=True)
            raise CliError(f"{str(run_path)!r}: {error}") from None
    total = math.prod(run.batch_size)
    return ExportSummary(dataset_id, path, written[0], written[1], total - written[1])


def _give_back_memory() -> None:
    """Hand freed heap memory back to the system (glibc's ``malloc_trim``; nothing elsewhere):
    an episode's arrays, freed once written, would otherwise stay in the heap between HDF5's own
    allocations, and the process would grow by about one episode per episode."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _open(run_path: str | Path) -> tuple[TensorDictBase | RunReader, dict[str, Any]]:
    """The run to export, read a few rows at a time from its folder (an asynchronous EnvPool's,
    whose rows are regrouped by env, in memory), and its ``run.json``."""
    info = read_info(run_path)
    try:
        reader = RunReader(run_path)
    except (OSError, ValueError) as error:
        raise CliError(f"{str(run_path)!r} cannot be read ({one_line(str(error))})") from None
    if ("collector", "env_ids") in reader.leaves():
        run, _ = load_run(run_path)
        return run, info
    return reader, info


def check_dataset_id(dataset_id: str, *, force: bool) -> Path:
    """Where the Minari dataset ``dataset_id`` goes, checked without writing: minari is installed,
    the id is a Minari id, and no dataset has it (unless ``force``).

    Raises:
        CliError: one of those is not so.
    """
    try:
        from minari.storage import get_dataset_path
        from minari.utils import parse_dataset_id
    except ImportError:
        raise CliError("--format minari needs minari: pip install 'rlcollect[minari]'") from None
    try:
        parse_dataset_id(dataset_id)
    except Exception as error:
        raise CliError(f"--dataset-id {dataset_id!r} is not a Minari dataset id "
                       f"(namespace/name-v0): {one_line(str(error))}") from None
    path = Path(get_dataset_path(dataset_id))
    if path.exists() and not force:
        raise CliError(f"--dataset-id {dataset_id!r} exists ({path}); pass --force to overwrite it")
    return path


def format_export(summary: ExportSummary) -> str:
    """The lines printed after an export."""
    return "\n".join([
        f"wrote Minari dataset {summary.dataset_id}: {summary.episodes:,} episodes, {summary.frames:,} steps",
        f"  left out  {summary.left_out:,} steps of episodes still running when the run stopped",
        f"  path      {summary.path}  (minari.load_dataset({summary.dataset_id!r}))",
    ])
