"""``rlcollect collect``: run a :class:`~rlcollect.Collector` and write every batch to a memmap folder.

The steps, top to bottom: work out the batch size, check ``--out``, make one env to read its spaces
(an unknown ``--env`` gets a clear error), build the policy from ``--policy``, build the collector,
create ``--out``, then collect with a progress bar, writing batch ``i`` to index ``i`` of the folder.

Examples:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     options = CollectOptions(out=folder + "/run", frames=64, num_envs=2, seed=0, progress=False)
    ...     summary = run_collect(options)
    >>> summary.frames, summary.batches, summary.batch_shape
    (64, 1, (2, 32))
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tqdm import tqdm

import rlcollect
from rlcollect.cli.errors import CliError, one_line
from rlcollect.cli.output import RunWriter, check_out, prepare_out
from rlcollect.cli.planning import (
    default_frames_per_batch,
    env_spaces,
    folder_bytes,
    size_text,
    warn_about_size,
)
from rlcollect.cli.policy import build_policy
from rlcollect.cli.requests import CollectOptions, CollectSummary
from rlcollect.cli.signals import StopSignals
from rlcollect.collectors import Collector, CollectorStats, MultiSyncCollector
from rlcollect.collectors.loggers import CollectorLogger, TensorBoardLogger, WandbLogger
from rlcollect.common.memmap_folder import load_memmap
from rlcollect.data.checks import BadDataError
from rlcollect.data.layout import observation_fields, stored_observation_space

__all__ = ["CollectOptions", "CollectSummary", "format_summary", "run_collect"]


_BAR_FORMAT = "{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} frames [{elapsed}<{remaining}{postfix}]"


class _Bar(tqdm):  # type: ignore[misc]
    """tqdm without its monitor thread: a thread in this process would make worker processes start
    through a forkserver (seconds of imports) instead of a fork (milliseconds)."""

    monitor_interval = 0


_DEVICE_TYPES = ("cpu", "cuda", "mps")


def _device(text: str | None) -> Any:
    """``--device`` as a ``torch.device`` this machine has, or ``None``."""
    if text is None:
        return None
    try:
        device = torch.device(text)
    except RuntimeError:
        raise CliError(f"--device {text!r} is not a torch device (e.g. cpu, cuda, cuda:1)") from None
    if device.type not in _DEVICE_TYPES:  # meta holds no data; others are not built for the CLI
        raise CliError(f"--device {text!r}: the CLI stores what the policy computes; it runs policies on "
                       f"{', '.join(_DEVICE_TYPES)}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CliError(f"--device {text!r}: this machine has no CUDA device "
                       "(torch.cuda.is_available() is False)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise CliError(f"--device {text!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise CliError(f"--device {text!r}: this machine has no MPS device "
                       "(torch.backends.mps.is_available() is False)")
    return device


def _format_return(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def _progress_postfix(stats: CollectorStats) -> str:
    mean_return = _format_return(stats.mean_return)
    return f"{stats.fps:,.0f} frames/s, {stats.episodes:,} episodes, mean return {mean_return}"


def run_collect(options: CollectOptions) -> CollectSummary:
    """Collect ``options.frames`` frames into ``options.out``; see the module docstring.

    A Ctrl-C (SIGINT) or SIGTERM stops collection; a batch being written is written and committed
    first, so the batches collected so far stay in the folder (``run.json`` says how many), the
    summary has ``complete == False`` and names the signal. A process killed outright (SIGKILL)
    leaves a folder that :func:`rlcollect.load_run` reads up to the batch it was writing.

    Raises:
        CliError: an unknown env, a bad ``--policy``, a policy that does not fit the env, an
            unusable ``--out`` folder, or bad data from the env or the policy during the run (the
            batches before it stay in the folder).
        Stopped: SIGINT or SIGTERM before the run folder was made.
    """
    frames_per_batch = options.frames_per_batch or default_frames_per_batch(options.frames, options.num_envs)
    check_out(options.out, force=options.force)  # refuse a bad --out before building anything
    device = _device(options.device)
    observation_space, action_space = env_spaces(options.env, options.env_kwargs)
    if options.obs_dtype is not None:  # the policy factory sees what the policy will be given
        observation_space = stored_observation_space(observation_space, getattr(torch, options.obs_dtype))
    policy = None
    if options.policy is not None:
        policy = build_policy(options.policy, observation_space, action_space)
    with StopSignals() as signals:
        collector = _make_collector(options, policy, device, frames_per_batch, observation_space)
        asked = options.frames_per_batch
        if asked is not None and collector.frames_per_batch != asked:
            print(f"rlcollect: note: --frames-per-batch {asked} rounded up to {collector.frames_per_batch}, "
                  f"a multiple of --num-envs {options.num_envs}", file=sys.stderr)
        try:
            with signals.critical():  # the folder is made whole, or not at all
                out = prepare_out(options.out, force=options.force)
                observation_keys = [f.key for f in observation_fields(observation_space)]
                writer = RunWriter(out, num_batches=len(collector), info=_setup_info(options, collector),
                                   next_obs=options.next_obs, observation_keys=observation_keys)
            seconds, bad_data = _collect_into(writer, collector, options, signals)
        finally:
            with signals.critical(raise_after=False):  # a second signal does not cut the shutdown
                collector.shutdown()
        with signals.critical(raise_after=False):
            summary = CollectSummary(
                out=out,
                frames=writer.written * collector.frames_per_batch,
                batches=writer.written,
                batches_planned=writer.num_batches,
                batch_shape=(collector.num_envs, collector.frames_per_batch // collector.num_envs),
                seconds=seconds,
                stats=collector.stats(),
                signal=signals.received,
                episodes=writer.episodes,
            )
            writer.finish(_result_info(summary))
            _check_stored_frames(summary)
    if bad_data is not None:
        raise CliError(f"{one_line(str(bad_data))}; nothing of that batch was stored, {summary.out} holds "
                       f"the first {summary.batches} batches")
    return summary


def _make_collector(
    options: CollectOptions, policy: Any, device: Any, frames_per_batch: int,
    observation_space: gym.Space[Any],
) -> Collector | MultiSyncCollector:
    """The collector ``options`` ask for: every env in this process, or split over ``--workers``."""
    try:
        with warnings.catch_warnings():  # the collector rounds up to whole steps: said in a note
            warnings.simplefilter("ignore")
            settings: dict[str, Any] = dict(
                frames_per_batch=frames_per_batch, total_frames=options.frames, seed=options.seed,
                create_env_kwargs=options.env_kwargs, policy_device=device, obs_dtype=options.obs_dtype,
                info_keys=list(options.info_keys))
            if options.workers == 1:
                return Collector(options.env, policy, num_envs=options.num_envs, **settings)
            # the same batches as one process's (same seed), its envs stepped in workers
            return MultiSyncCollector(options.env, policy, num_workers=options.workers,
                                      num_envs_per_worker=options.num_envs // options.workers, **settings)
    except (ValueError, TypeError) as error:  # the policy does not fit the env, or a bad setting
        prefix = f"--policy {options.policy!r}: " if options.policy is not None else ""
        raise CliError(prefix + one_line(str(error))) from None
    except Exception as error:  # the policy's dry step on the env's observations raised
        if options.policy is None:
            raise
        notes = "".join(f" ({one_line(note)})" for note in getattr(error, "__notes__", []))
        raise CliError(
            f"--policy {options.policy!r} failed on {options.env}'s observations "
            f"({observation_space}): {type(error).__name__}: {one_line(str(error))}{notes}"
        ) from None


def _collect_into(
    writer: RunWriter, collector: Collector | MultiSyncCollector, options: CollectOptions,
    signals: StopSignals,
) -> tuple[float, BadDataError | None]:
    """Write each batch of ``collector`` to the folder, with a progress bar and the logger, until
    the run ends, a stop signal or Ctrl-C comes, or bad data is met; the loop's seconds and the
    bad data (``None`` if none)."""
    bar = _Bar(
        total=len(collector) * collector.frames_per_batch,
        desc=options.env + " ",
        unit="frame",
        unit_scale=True,
        bar_format=_BAR_FORMAT,
        disable=None if options.progress else True,  # None: off when stderr is not a terminal
        file=sys.stderr,
    )
    logger = _make_logger(options, writer.out)
    start = time.perf_counter()
    try:
        for batch in collector:
            assert batch is not None
            if writer.written == 0:
                warn_about_size(batch, len(collector), writer.out, options.next_obs,
                                 writer.observation_keys)
            with signals.critical():  # a signal now stops the run once the batch is committed
                writer.write(batch)
            if logger is not None:
                logger(collector)
            bar.update(collector.frames_per_batch)
            bar.set_postfix_str(_progress_postfix(collector.stats()), refresh=False)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep the batches written so far; the summary says so
        pass
    except BadDataError as error:  # the env or the policy produced bad data: kept out, said in one line
        return time.perf_counter() - start, error
    finally:
        bar.close()
        if logger is not None:
            logger.close()
    return time.perf_counter() - start, None


#: Where ``--log`` writes by default, inside the run folder (a run's own files: ``--force`` deletes them).
LOGS = "logs"


def _make_logger(options: CollectOptions, out: Path) -> CollectorLogger | None:
    """The ``--log`` logger, writing to ``--log-dir`` (default ``out/logs``)."""
    if options.log is None:
        return None
    log_dir = Path(options.log_dir) if options.log_dir is not None else out / LOGS
    try:
        if options.log == "tensorboard":
            return TensorBoardLogger(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        return WandbLogger(project="rlcollect", dir=str(log_dir), name=out.name,
                           config={"env": options.env, "num_envs": options.num_envs, "seed": options.seed})
    except ImportError as error:
        raise CliError(f"--log {options.log}: {one_line(str(error))}") from None


def _setup_info(options: CollectOptions, collector: Collector | MultiSyncCollector) -> dict[str, Any]:
    """How the run is made: the first part of ``run.json``."""
    return {
        "rlcollect_version": rlcollect.__version__,
        "command": options.command_line(),
        "env": options.env,
        "env_kwargs": {key: repr(value) for key, value in options.env_kwargs.items()},
        "device": options.device,
        "obs_dtype": options.obs_dtype,
        "info_keys": list(options.info_keys),
        "num_envs": options.num_envs,
        "workers": options.workers,
        "frames_per_batch": collector.frames_per_batch,
        "frames_requested": options.frames,
        "policy": options.policy,
        "seed": options.seed,
        "logs": LOGS if options.log is not None and options.log_dir is None else None,  # --force deletes them
        "layout": "[batches, envs, time]" if collector.num_envs == options.num_envs else
                  "[batches, rows, time]: frames in the order they complete (an asynchronous EnvPool); "
                  "collector.env_ids names each frame's env",
    }


def _result_info(summary: CollectSummary) -> dict[str, Any]:
    """What the run collected: the second part of ``run.json``."""
    return {
        "complete": summary.complete,
        "frames": summary.frames,
        "seconds": round(summary.seconds, 3),
        **(summary.episodes.record() if summary.episodes is not None else {}),
    }


def _check_stored_frames(summary: CollectSummary) -> None:
    """Load the folder back: it holds ``[batches, envs, T]``, and every frame the collector made."""
    if summary.batches == 0:
        return
    stored = load_memmap(summary.out)
    expected = (summary.batches, *summary.batch_shape)  # an interrupted run: the batches written
    if tuple(stored.batch_size) != expected:
        raise RuntimeError(
            f"{summary.out} holds batch_size {list(stored.batch_size)}, expected {list(expected)}"
        )
    if summary.complete and stored.numel() != summary.stats.frames:
        raise RuntimeError(
            f"{summary.out} holds {stored.numel()} frames, the collector produced {summary.stats.frames}"
        )


def format_summary(summary: CollectSummary, options: CollectOptions) -> str:
    """The lines printed after a run: frames, batches, time, speed, episodes, output."""
    stats = summary.stats
    num_envs, steps = summary.batch_shape
    policy = options.policy or "uniform random actions"
    state = "collected" if summary.complete else "INTERRUPTED after"
    loader = "rlcollect.load_run"
    out = str(summary.out)
    lines = [
        f"{state} {summary.frames:,} frames of {options.env} ({num_envs} envs"
        + (f" in {options.workers} workers" if options.workers > 1 else "") + f", policy: {policy})",
        f"  batches    {summary.batches} of {summary.batches_planned}, each [{num_envs} envs, {steps} steps]",
        f"  seconds    {summary.seconds:.2f}",
        f"  frames/s   {summary.fps:,.0f} (collection alone: {stats.fps:,.0f})",
        f"  episodes   {summary.episodes.describe() if summary.episodes is not None else 'n/a'}",
        f"  output     {out}  ({loader}({out!r}): batch_size [{summary.batches}, {num_envs}, {steps}]"
        f"{', next observations rebuilt' if not options.next_obs else ''}), "
        f"{size_text(folder_bytes(summary.out))}",
    ]
    return "\n".join(lines)
