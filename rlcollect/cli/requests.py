"""What ``rlcollect collect`` is asked for (:class:`CollectOptions`, the command line parsed and
checked, which can write itself back as a command) and what a run gives back
(:class:`CollectSummary`).

Example:
    >>> options = CollectOptions(out="runs/my run", frames=1000, seed=0,
    ...                          env_kwargs={"sutton_barto_reward": True})
    >>> print(options.command_line())  # doctest: +NORMALIZE_WHITESPACE
    rlcollect collect --env CartPole-v1 --frames 1000 --num-envs 8 --workers 1 --seed 0
        --out 'runs/my run' --env-kwargs sutton_barto_reward=True
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcollect.cli.episodes import EpisodeTally
from rlcollect.collectors import CollectorStats

__all__ = ["CollectOptions", "CollectSummary"]


@dataclass(frozen=True)
class CollectOptions:
    """What ``rlcollect collect`` was asked for (the command-line arguments, parsed and checked).

    Attributes:
        out: the folder that receives the run.
        env: a Gymnasium env id.
        env_kwargs: keyword arguments for ``gymnasium.make`` (``--env-kwargs``).
        device: where the policy runs (``--device``); ``None`` for where its parameters are.
        obs_dtype: the dtype floating-point observations are stored and given to the policy in
            (``--obs-dtype``); ``None`` for the env's.
        info_keys: keys of the env's step infos stored at ``("next", "info", key)`` (``--info-keys``).
        frames: frames to collect, summed over envs (rounded up to whole batches).
        num_envs: copies of the env, in all.
        workers: worker processes the envs are split over (``num_envs / workers`` each; a
            :class:`~rlcollect.MultiSyncCollector`); 1: every env in this process.
        policy: ``"pkg.module:factory"``, or ``None`` for uniform random actions.
        seed: env ``i`` is reset with ``seed + i`` first; ``None`` for unseeded.
        frames_per_batch: frames per batch (rounded up to a multiple of ``num_envs``); ``None``
            for 128 steps per env, or fewer when ``frames`` is smaller.
        next_obs: store the next observations; ``False``: :func:`rlcollect.load_run` rebuilds them.
        log: ``"tensorboard"`` or ``"wandb"``: log each batch's episodes and counters there
            (:mod:`rlcollect.collectors.loggers`); ``None`` for no logging.
        log_dir: where ``log`` writes; ``None`` for ``out/logs``.
        force: overwrite a previous run in ``out``.
        progress: show a progress bar on stderr (when stderr is a terminal).
        command: the command line as typed, quoted (``run.json`` and ``rlcollect inspect`` show
            it); ``None``: :meth:`command_line` rebuilds it from these options.
    """

    out: Path | str
    env: str = "CartPole-v1"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    obs_dtype: str | None = None
    info_keys: tuple[str, ...] = ()
    frames: int = 100_000
    num_envs: int = 8
    workers: int = 1
    policy: str | None = None
    seed: int | None = None
    frames_per_batch: int | None = None
    next_obs: bool = True
    log: str | None = None
    log_dir: Path | str | None = None
    force: bool = False
    progress: bool = True
    command: str | None = None

    def command_line(self) -> str:
        """The ``rlcollect collect`` command that asks for this run, quoted to paste back: the one
        typed (``command``) if known, else rebuilt from these options."""
        if self.command is not None:
            return self.command
        flags = {"--env": self.env, "--device": self.device, "--obs-dtype": self.obs_dtype,
                 "--frames": self.frames, "--num-envs": self.num_envs, "--workers": self.workers,
                 "--policy": self.policy, "--seed": self.seed, "--frames-per-batch": self.frames_per_batch,
                 "--log": self.log, "--log-dir": self.log_dir, "--out": self.out}
        words = ["rlcollect", "collect"]
        words += [word for flag, value in flags.items() if value is not None for word in (flag, str(value))]
        if self.env_kwargs:
            words += ["--env-kwargs", *(f"{key}={value!r}" for key, value in self.env_kwargs.items())]
        if self.info_keys:
            words += ["--info-keys", *self.info_keys]
        switches = {"--no-next-obs": not self.next_obs, "--force": self.force,
                    "--no-progress": not self.progress}
        words += [flag for flag, on in switches.items() if on]
        return shlex.join(words)


@dataclass(frozen=True)
class CollectSummary:
    """What a run collected and where it went.

    Attributes:
        out: the run folder.
        frames: frames collected and stored (whole batches: at least the frames asked for).
        batches: batches stored.
        batches_planned: batches the run was to collect (more than ``batches`` if interrupted).
        batch_shape: ``(num_envs, T)`` of one batch.
        seconds: wall-clock seconds of the collection loop, writing included.
        stats: the collector's own counters at the end (``fps`` counts collection time only).
        episodes: the episodes ended in the frames stored (``None`` without done flags); what
            ``run.json`` and ``rlcollect inspect`` report too.
        signal: the signal that stopped the run, or came while it ended (SIGINT, SIGTERM);
            ``None`` for none.
    """

    out: Path
    frames: int
    batches: int
    batches_planned: int
    batch_shape: tuple[int, int]
    seconds: float
    stats: CollectorStats
    signal: int | None = None
    episodes: EpisodeTally | None = None

    @property
    def complete(self) -> bool:
        """Whether every planned batch was collected."""
        return self.batches == self.batches_planned

    @property
    def fps(self) -> float:
        """Frames per wall-clock second of the loop, writing included."""
        return self.frames / self.seconds if self.seconds > 0 else 0.0
