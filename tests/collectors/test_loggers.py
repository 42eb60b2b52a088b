"""Loggers: each batch's episodes and counters, at the step of the collector's frame count."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rlcollect import Collector, TensorBoardLogger, WandbLogger
from rlcollect.cli.main import main
from rlcollect.collectors.loggers import CollectorLogger
from tests.envs_for_tests import TiltPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)


def collector() -> Collector:
    return Collector(make_cartpole, TiltPolicy(), num_envs=2, frames_per_batch=100, total_frames=400, seed=1)


def test_metrics_summarise_the_episodes_and_the_counters() -> None:
    with collector() as c:
        batch = next(iter(c))
        assert batch is not None
        episodes, stats = c.episodes(), c.stats()
    metrics = CollectorLogger.metrics(episodes, stats)
    returns = [float(r) for r in episodes["return"]]
    assert metrics["episode/count"] == len(returns) > 0
    assert metrics["episode/return_mean"] == pytest.approx(sum(returns) / len(returns))
    assert metrics["episode/return_min"] == min(returns) and metrics["episode/return_max"] == max(returns)
    assert metrics["episode/length_mean"] == pytest.approx(float(episodes["length"].double().mean()))
    assert metrics["collector/frames"] == 100 and metrics["collector/episodes"] == len(returns)
    assert not any(isinstance(v, float) and math.isnan(v) for v in metrics.values())
    quiet = CollectorLogger.metrics(episodes[:0], stats)  # no episode ended: no episode/ names
    assert not any(name.startswith("episode/") for name in quiet)


def test_tensorboard_logger_writes_each_batch_at_its_frame_count(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    written = []
    with collector() as c, TensorBoardLogger(tmp_path / "tb") as logger:
        for _ in c:
            written.append(logger(c))
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    frames = [e.value for e in events.Scalars("collector/frames")]
    assert frames == [100.0, 200.0, 300.0, 400.0]
    means = {e.step: e.value for e in events.Scalars("episode/return_mean")}
    expected = {m["collector/frames"]: m["episode/return_mean"] for m in written if "episode/count" in m}
    assert means.keys() == expected.keys() and len(means) > 0
    for step, value in expected.items():
        assert means[step] == pytest.approx(value, rel=1e-6)
    assert [h.step for h in events.Histograms("episode/return")] == sorted(expected)


def test_wandb_logger_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    with collector() as c:
        logger = WandbLogger(project="rlcollect-test", mode="offline", dir=str(tmp_path))
        written = [logger(c) for _ in c]
        summary = {k: logger.run.summary[k] for k in ("collector/frames", "episode/return_mean")}
        logger.close()
    last_with_episodes = [m for m in written if "episode/count" in m][-1]
    assert summary["collector/frames"] == 400
    assert summary["episode/return_mean"] == pytest.approx(last_with_episodes["episode/return_mean"])
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))


@pytest.mark.parametrize("backend", ["tensorboard", "wandb"])
def test_cli_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    if backend == "wandb":  # wandb reads its environment once per process: as a fresh CLI process would
        import wandb

        wandb.teardown()
    out = tmp_path / "run"
    assert main(["collect", "--frames", "512", "--num-envs", "2", "--out", str(out), "--seed", "0",
                 "--no-progress", "--log", backend]) == 0
    if backend == "tensorboard":
        assert list((out / "logs").glob("events.out.tfevents.*"))
    else:
        assert list((out / "logs" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert TensorDict.load_memmap(out).batch_size == torch.Size([2, 2, 128])  # logs beside the run
    # the logs are the run's own files: --force replaces them with the new run's
    assert main(["collect", "--frames", "256", "--num-envs", "2", "--out", str(out), "--seed", "0",
                 "--no-progress", "--force"]) == 0
    assert not (out / "logs").exists() and TensorDict.load_memmap(out).batch_size == torch.Size([1, 2, 128])
