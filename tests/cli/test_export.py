"""``rlcollect export --format minari`` and ``collect --format minari``: episode for episode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlcollect import Collector, load_run
from rlcollect.cli.export import run_episodes
from rlcollect.cli.main import main
from tests.envs_for_tests import make_dict_env

minari = pytest.importorskip("minari", reason="minari is the optional extra rlcollect[minari]")
Capsys = pytest.CaptureFixture[str]


@pytest.fixture(autouse=True)
def datasets_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def reference_episodes(run: TensorDict, keys: list[str]) -> list[dict[str, Any]]:
    """The episodes that ended in ``run`` ([batches, envs, T]), by a plain loop over its steps."""
    batches, num_envs, steps = run.batch_size
    ended = []
    for env in range(num_envs):
        episode: dict[str, Any] = {"observations": [], "actions": [], "rewards": [],
                                   "terminations": [], "truncations": []}
        for b in range(batches):
            for t in range(steps):
                frame = run[b, env, t]
                episode["observations"].append({k: frame[k].numpy() for k in keys})
                episode["actions"].append(frame["action"].numpy())
                episode["rewards"].append(float(frame["next", "reward"]))
                episode["terminations"].append(bool(frame["next", "terminated"]))
                episode["truncations"].append(bool(frame["next", "truncated"]))
                if frame["next", "done"]:
                    episode["observations"].append({k: frame["next", k].numpy() for k in keys})
                    ended.append((int(frame["collector", "traj_ids"]), episode))
                    episode = {name: [] for name in episode}
    return [episode for _, episode in sorted(ended, key=lambda pair: pair[0])]


def assert_dataset_equals(dataset: Any, expected: list[dict[str, Any]], keys: list[str]) -> None:
    assert dataset.total_episodes == len(expected) > 0
    for episode, reference in zip(dataset.iterate_episodes(), expected, strict=True):
        for key in keys:
            stored = episode.observations if keys == ["observation"] else episode.observations[key]
            want = np.stack([step[key] for step in reference["observations"]])
            assert stored.dtype == want.dtype and np.array_equal(stored, want), key
        assert np.array_equal(episode.actions, np.stack(reference["actions"]))
        assert np.array_equal(episode.rewards, np.array(reference["rewards"], episode.rewards.dtype))
        assert episode.terminations.tolist() == reference["terminations"]
        assert episode.truncations.tolist() == reference["truncations"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])  # terminations; truncations
def test_collect_format_minari_writes_every_episode_that_ended(
    tmp_path: Path, capsys: Capsys, env: str
) -> None:
    out = tmp_path / "run"
    argv = ["collect", "--env", env, "--frames", "1536", "--num-envs", "2", "--out", str(out),
            "--seed", "0", "--no-progress", "--format", "minari", "--dataset-id", "test/episodes-v0"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    run = TensorDict.load_memmap(out)
    expected = reference_episodes(run, ["observation"])
    assert f"wrote Minari dataset test/episodes-v0: {len(expected):,} episodes" in text
    dataset = minari.load_dataset("test/episodes-v0")
    assert_dataset_equals(dataset, expected, ["observation"])
    assert dataset.spec.env_spec is not None and dataset.spec.env_spec.id == env
    assert dataset.observation_space.shape == run["observation"].shape[3:]
    assert dataset.action_space == gymnasium.make(env).action_space
    recovered = dataset.recover_environment()
    assert recovered.spec is not None and recovered.spec.id == env


@pytest.mark.timeout(120)
def test_export_of_a_run_without_next_observations(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "run"
    assert main(["collect", "--frames", "1024", "--num-envs", "2", "--out", str(out), "--seed", "1",
                 "--no-progress", "--no-next-obs"]) == 0
    assert main(["export", str(out), "--format", "minari", "--dataset-id", "test/lean-v0"]) == 0
    assert "left out" in capsys.readouterr().out
    assert_dataset_equals(minari.load_dataset("test/lean-v0"),
                          reference_episodes(load_run(out), ["observation"]), ["observation"])


@pytest.mark.timeout(60)
def test_dict_observations_become_episodes_of_dicts() -> None:
    with Collector(make_dict_env, frames_per_batch=2 * 40, total_frames=3 * 2 * 40, num_envs=2,
                   seed=2) as collector:
        run = torch.stack([batch.clone() for batch in collector])
    keys = ["pos", "count"]
    episodes = list(run_episodes(run, [(key,) for key in keys]))
    expected = reference_episodes(run, keys)
    assert len(episodes) == len(expected) > 0
    for episode, reference in zip(episodes, expected, strict=True):
        for key in keys:
            want = np.stack([step[key] for step in reference["observations"]])
            assert np.array_equal(episode["observations"][(key,)], want)
        assert episode["rewards"].tolist() == reference["rewards"]


def assert_one_line_error(capsys: Capsys, fragment: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlcollect: error: ") and fragment in err, err


@pytest.mark.timeout(60)
def test_minari_errors_are_one_line(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "run"
    base = ["collect", "--frames", "512", "--num-envs", "2", "--out", str(out), "--no-progress"]
    assert main([*base, "--format", "minari"]) == 2
    assert_one_line_error(capsys, "--format minari and --dataset-id ID go together")
    assert main([*base, "--dataset-id", "test/x-v0"]) == 2
    assert_one_line_error(capsys, "--dataset-id needs --format minari")
    assert main([*base, "--format", "minari", "--dataset-id", "not an id!"]) == 2
    assert_one_line_error(capsys, "is not a Minari dataset id")
    assert not out.exists()  # refused before collecting
    assert main([*base, "--format", "minari", "--dataset-id", "test/x-v0"]) == 0
    capsys.readouterr()
    assert main(["export", str(out), "--format", "minari", "--dataset-id", "test/x-v0"]) == 2
    assert_one_line_error(capsys, "exists")
    assert main(["export", str(out), "--format", "minari", "--dataset-id", "test/x-v0", "--force"]) == 0
    assert main(["export", str(tmp_path), "--format", "minari", "--dataset-id", "test/y-v0"]) == 2
    assert_one_line_error(capsys, "not a saved TensorDict folder")


@pytest.mark.timeout(120)
def test_export_of_an_asynchronous_envpool_run(tmp_path: Path, capsys: Capsys) -> None:
    """Rows of an asynchronous EnvPool's batches are not envs: the episodes are regrouped by
    ``("collector", "env_ids")``, each env's frames in the order they completed."""
    pytest.importorskip("envpool", reason="needs envpool: pip install rlcollect[envpool]")
    out = tmp_path / "run"
    assert main(["collect", "--env", "envpool:CartPole-v1", "--env-kwargs", "batch_size=2", "--num-envs", "4",
                 "--frames", "480", "--frames-per-batch", "40", "--out", str(out), "--seed", "0",
                 "--no-progress"]) == 0
    assert main(["export", str(out), "--format", "minari", "--dataset-id", "test/async-v0"]) == 0
    capsys.readouterr()
    run = load_run(out)
    frames = run.reshape(-1)  # in the order they completed
    episodes: dict[int, dict[str, Any]] = {}
    ended = []
    for k in range(frames.numel()):
        frame = frames[k]
        env = int(frame["collector", "env_ids"])
        episode = episodes.setdefault(env, {"observations": [], "actions": [], "rewards": [],
                                            "terminations": [], "truncations": []})
        episode["observations"].append({"observation": frame["observation"].numpy()})
        episode["actions"].append(frame["action"].numpy())
        episode["rewards"].append(float(frame["next", "reward"]))
        episode["terminations"].append(bool(frame["next", "terminated"]))
        episode["truncations"].append(bool(frame["next", "truncated"]))
        if frame["next", "done"]:
            episode["observations"].append({"observation": frame["next", "observation"].numpy()})
            ended.append((int(frame["collector", "traj_ids"]), episodes.pop(env)))
    expected = [episode for _, episode in sorted(ended, key=lambda pair: pair[0])]
    assert len(expected) > 10
    assert_dataset_equals(minari.load_dataset("test/async-v0"), expected, ["observation"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("index", [3, 261])  # the first episode; one of the second batch, mid-export
def test_a_nan_in_the_folder_is_an_error_and_no_dataset_is_left(tmp_path: Path, capsys: Capsys,
                                                               index: int) -> None:
    out = tmp_path / "run"
    assert main(["collect", "--frames", "512", "--num-envs", "2", "--out", str(out), "--seed", "1",
                 "--no-progress"]) == 0
    rewards = np.memmap(out / "next" / "reward.memmap", dtype=np.float32, mode="r+")
    rewards[index] = np.nan  # the folder damaged after its run (a collector stores no NaN)
    rewards.flush()
    capsys.readouterr()
    assert main(["export", str(out), "--format", "minari", "--dataset-id", "test/nan-v0"]) == 2
    err = capsys.readouterr().err
    assert "the rewards of trajectory" in err and "are nan: not finite" in err, err
    assert not (tmp_path / "datasets" / "test" / "nan-v0").exists()
