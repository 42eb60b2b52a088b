"""Log a collector's episodes and counters to TensorBoard or Weights & Biases, one call per batch.

A logger is a callable: ``logger(collector)`` drains :meth:`~rlcollect.BaseCollector.episodes`
and reads :meth:`~rlcollect.BaseCollector.stats`, and writes one point per name at the step
``stats().frames``:

- ``collector/frames``, ``collector/fps``, ``collector/episodes``, ``collector/policy_version``,
  ``collector/policy_lag``;
- when episodes ended since the last call: ``episode/count``, ``episode/return_mean``,
  ``episode/return_min``, ``episode/return_max``, ``episode/length_mean``, and the returns as a
  histogram (``episode/return``); with ``info_keys``, ``episode/info/<key>_mean`` for each scalar
  key: its mean over the episodes' last steps (``episode/info/is_success_mean``: SB3's success rate).

:meth:`CollectorLogger.metrics` gives the same names and values without a backend. TensorBoard
(``pip install tensorboard``) and W&B (``pip install wandb``) are optional, imported when a logger
is made. Nothing is logged per step: the episodes come from the collector's own per-batch records.

Examples:
    >>> from rlcollect import Collector
    >>> with Collector("CartPole-v1", frames_per_batch=256, total_frames=512, seed=0) as collector:
    ...     for batch in collector:
    ...         metrics = CollectorLogger.metrics(collector.episodes(), collector.stats())
    >>> metrics["collector/frames"], metrics["episode/count"] > 0
    (512, True)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.stats import CollectorStats

__all__ = ["CollectorLogger", "TensorBoardLogger", "WandbLogger"]


class CollectorLogger:
    """The shared part: what is logged (:meth:`metrics`); subclasses say where (:meth:`write`)."""

    def __call__(self, collector: BaseCollector) -> dict[str, float]:
        """Log what ``collector`` did since the last call; return the scalars written."""
        episodes, stats = collector.episodes(), collector.stats()
        metrics = self.metrics(episodes, stats)
        self.write(metrics, episodes["return"] if len(episodes) else None, stats.frames)
        return metrics

    @staticmethod
    def metrics(episodes: TensorDictBase, stats: CollectorStats) -> dict[str, Any]:
        """The scalars for ``episodes`` (a :meth:`~rlcollect.BaseCollector.episodes` table) and
        ``stats``, by name."""
        metrics: dict[str, Any] = {
            "collector/frames": stats.frames, "collector/fps": stats.fps,
            "collector/episodes": stats.episodes, "collector/policy_version": stats.policy_version,
            "collector/policy_lag": stats.policy_lag,
        }
        if len(episodes):
            returns = episodes["return"]
            metrics.update({
                "episode/count": len(episodes), "episode/return_mean": returns.mean().item(),
                "episode/return_min": returns.min().item(), "episode/return_max": returns.max().item(),
                "episode/length_mean": episodes["length"].double().mean().item(),
            })
            infos = episodes.get("info", None)  # the info keys' values at the episodes' last steps
            for key, values in ({} if infos is None else infos.items()):
                if values.dim() == 1:  # a scalar per episode
                    metrics[f"episode/info/{key}_mean"] = values.double().mean().item()
        return {name: value for name, value in metrics.items()
                if not (isinstance(value, float) and math.isnan(value))}

    def write(self, metrics: dict[str, Any], returns: torch.Tensor | None, step: int) -> None:
        """Write ``metrics`` and the ``returns`` histogram at ``step``."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush and close the backend."""

    def __enter__(self) -> CollectorLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TensorBoardLogger(CollectorLogger):
    """Writes to a TensorBoard event folder (``tensorboard --logdir LOG_DIR`` shows it).

    Args:
        log_dir: the folder (created).
    """

    def __init__(self, log_dir: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ImportError("TensorBoardLogger needs tensorboard: pip install tensorboard") from None
        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))

    def write(self, metrics: dict[str, Any], returns: torch.Tensor | None, step: int) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)
        if returns is not None:
            self._writer.add_histogram("episode/return", returns, global_step=step)

    def close(self) -> None:
        self._writer.close()


class WandbLogger(CollectorLogger):
    """Logs to a Weights & Biases run (``mode="offline"`` writes it locally, for ``wandb sync``).

    Args:
        project: the W&B project.
        run: an existing ``wandb`` run to log to instead of starting one.
        **init_kwargs: passed to ``wandb.init`` (``mode``, ``dir``, ``name``, ``config``, ...).
    """

    def __init__(self, project: str | None = None, run: Any = None, **init_kwargs: Any) -> None:
        try:
            import wandb
        except ImportError:
            raise ImportError("WandbLogger needs wandb: pip install wandb") from None
        self._wandb = wandb
        self._owned = run is None
        self.run = run if run is not None else wandb.init(project=project, **init_kwargs)

    def write(self, metrics: dict[str, Any], returns: torch.Tensor | None, step: int) -> None:
        record: dict[str, Any] = dict(metrics)
        if returns is not None:
            record["episode/return"] = self._wandb.Histogram(returns.tolist())
        self.run.log(record, step=step, commit=True)  # written now, not when the next step comes

    def close(self) -> None:
        if self._owned:
            self.run.finish()
