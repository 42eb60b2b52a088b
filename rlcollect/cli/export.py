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
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.cli.errors import CliError, one_line
from rlcollect.cli.output import load_run
from rlcollect.data.layout import observation_fields, stored_observation_space
from rlcollect.data.trajectories import pad_trajectories

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


def run_episodes(run: TensorDictBase, observation_keys: list[tuple[str, ...]]) -> list[dict[str, Any]]:
    """The episodes that ended in ``run`` (``[batches, envs, T]``), in trajectory-id order, each a
    dict of numpy arrays: ``observations`` (an array, or a dict of them by key, ``T + 1`` steps),
    ``actions``, ``rewards``, ``terminations``, ``truncations`` and ``trajectory_id``."""
    # [envs, steps]: each env's steps in the order it took them
    steps_of = _steps_of_each_env(run)
    num_envs = steps_of.batch_size[0]
    done = steps_of.get(("next", "done")).reshape(num_envs, -1)
    envs, ends = done.nonzero(as_tuple=True)  # by env, then time
    starts = torch.zeros_like(ends)
    same_env = envs[1:] == envs[:-1]
    starts[1:] = torch.where(same_env, ends[:-1] + 1, 0)
    traj_ids = steps_of.get(("collector", "traj_ids"))[envs, ends]
    arrays = {
        "observation": {key: steps_of.get(key).numpy() for key in observation_keys},
        "next_observation": {key: steps_of.get(("next", *key)).numpy() for key in observation_keys},
        "actions": steps_of.get("action").numpy(),
        "rewards": steps_of.get(("next", "reward")).reshape(num_envs, -1).numpy(),
        "terminations": steps_of.get(("next", "terminated")).reshape(num_envs, -1).numpy(),
        "truncations": steps_of.get(("next", "truncated")).reshape(num_envs, -1).numpy(),
    }
    episodes = []
    for i in torch.argsort(traj_ids).tolist():  # one slice per array per episode, no per-step work
        env, start, end = int(envs[i]), int(starts[i]), int(ends[i]) + 1
        obs = {key: np.concatenate([arrays["observation"][key][env, start:end],
                                    arrays["next_observation"][key][env, end - 1 : end]])
               for key in observation_keys}
        episodes.append({
            "observations": obs[("observation",)] if observation_keys == [("observation",)] else obs,
            "actions": arrays["actions"][env, start:end],
            "rewards": arrays["rewards"][env, start:end],
            "terminations": arrays["terminations"][env, start:end],
            "truncations": arrays["truncations"][env, start:end],
            "trajectory_id": int(traj_ids[i]),
        })
    return episodes


def _steps_of_each_env(run: TensorDictBase) -> TensorDictBase:
    """``run`` (``[batches, rows, T]``) as ``[envs, steps]``: rows are envs, except in the run of an
    asynchronous EnvPool, whose frames (in the order they completed, ``("collector", "env_ids")``
    naming each one's env) are regrouped by env, zero-padded where an env has fewer."""
    batches, rows, steps = run.batch_size
    if ("collector", "env_ids") not in run.keys(True):
        return run.permute(1, 0, 2).reshape(rows, batches * steps)
    frames = run.reshape(-1)  # batch after batch, row after row: the order they completed
    env_ids = frames.get(("collector", "env_ids"))
    order = torch.argsort(env_ids, stable=True)
    counts = torch.unique_consecutive(env_ids[order], return_counts=True)[1].tolist()
    return pad_trajectories(list(frames[order].split(counts))).exclude(("collector", "mask"))


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

    run, info = load_run(run_path)
    if run.batch_dims != 3:
        raise CliError(f"{str(run_path)!r} holds batch_size {list(run.batch_size)}, not a run's "
                       "[batches, envs, time]")
    observation_space, action_space = _spaces(info)
    keys = [field.key for field in observation_fields(observation_space)]
    episodes = run_episodes(run, keys)
    if not episodes:
        raise CliError(f"{str(run_path)!r} holds no episode that ended: a Minari dataset needs whole "
                       "episodes (collect more --frames)")
    if path.exists():  # checked free above; with force, the old dataset goes now
        shutil.rmtree(path)
    buffers = [
        EpisodeBuffer(
            id=i,
            observations=episode["observations"] if not isinstance(episode["observations"], dict)
            else _nested(episode["observations"]),
            actions=episode["actions"],
            rewards=episode["rewards"],
            terminations=episode["terminations"],
            truncations=episode["truncations"],
        )
        for i, episode in enumerate(episodes)
    ]
    env = info.get("env", "")
    spec = gym.spec(env) if env in gym.registry else None
    with warnings.catch_warnings():  # Minari's advice on metadata (author, code link) is not ours
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        minari.create_dataset_from_buffers(
            dataset_id, buffers, observation_space=observation_space, action_space=action_space,
            env=spec, algorithm_name=f"rlcollect collect --policy {info.get('policy') or 'random'}",
            data_format="hdf5", jpeg_encoding=False,
            description=f"{env} collected by rlcollect {info.get('rlcollect_version', '')}",
        )
    frames = sum(len(episode["rewards"]) for episode in episodes)
    return ExportSummary(dataset_id, path, len(episodes), frames, run.numel() - frames)


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
