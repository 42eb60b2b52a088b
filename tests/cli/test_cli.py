"""The ``rlcollect`` command: runs written to memmap folders, ``inspect``, and one-line errors."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import rlcollect
from rlcollect import Collector
from rlcollect.cli.main import main
from rlcollect.cli.output import WRITE_TEST

POLICIES = "tests.cli.policies_for_tests"
Capsys = pytest.CaptureFixture[str]
REPO = Path(__file__).resolve().parents[2]

EXPECTED_LAYOUT = {  # key -> (per-frame shape, dtype) for CartPole
    ("observation",): ((4,), torch.float32),
    ("action",): ((), torch.int64),
    ("next", "observation"): ((4,), torch.float32),
    ("next", "reward"): ((1,), torch.float32),
    ("next", "terminated"): ((1,), torch.bool),
    ("next", "truncated"): ((1,), torch.bool),
    ("next", "done"): ((1,), torch.bool),
    ("collector", "traj_ids"): ((), torch.int64),
    ("policy_version",): ((), torch.int64),
}


def collect(out: Path, *extra: str, frames: int = 1000, num_envs: int = 4) -> int:
    """``rlcollect collect`` on CartPole into ``out``, seeded, without a progress bar."""
    argv = ["collect", "--env", "CartPole-v1", "--frames", str(frames), "--num-envs", str(num_envs),
            "--out", str(out), "--seed", "0", "--no-progress", *extra]
    return main(argv)


def leaf_keys(td: TensorDict) -> set[tuple[str, ...]]:
    return {(k,) if isinstance(k, str) else tuple(k) for k in td.keys(True, True)}


@pytest.mark.timeout(60)
def test_collect_writes_a_memmap_run_that_loads_back(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "runs" / "cartpole"
    assert collect(out, frames=1000, num_envs=4) == 0

    stored = TensorDict.load_memmap(out)
    # 1000 frames with 4 envs: 250 steps per env, at most 128 per batch -> 2 batches of [4, 128]
    assert stored.batch_size == torch.Size([2, 4, 128])
    assert stored.numel() == 1024
    assert leaf_keys(stored) == set(EXPECTED_LAYOUT)
    for key, (shape, dtype) in EXPECTED_LAYOUT.items():
        assert stored.get(key).shape == (2, 4, 128, *shape), key
        assert stored.get(key).dtype == dtype, key

    info = json.loads((out / "run.json").read_text())
    assert info["frames"] == 1024 and info["complete"] and info["batches_written"] == 2
    assert info["env"] == "CartPole-v1" and info["seed"] == 0 and info["policy"] is None

    captured = capsys.readouterr()
    assert "collected 1,024 frames of CartPole-v1" in captured.out
    assert f"output     {out}" in captured.out
    assert captured.err == ""


@pytest.mark.timeout(60)
def test_stored_batches_are_the_collectors_batches(tmp_path: Path) -> None:
    """Same seed and settings: the folder holds exactly what a Collector yields, batch by batch."""
    out = tmp_path / "run"
    assert collect(out, "--frames-per-batch", "96", frames=300, num_envs=3) == 0
    stored = TensorDict.load_memmap(out)

    with pytest.warns(UserWarning, match=r"total_frames=300 .* 384 frames \(4 batches\)"):
        collector = Collector("CartPole-v1", frames_per_batch=96, total_frames=300, num_envs=3, seed=0)
    batches = list(collector)
    assert stored.batch_size == torch.Size([len(batches), 3, 32])
    assert stored.numel() == collector.stats().frames == 4 * 96
    for i, batch in enumerate(batches):
        assert batch is not None
        for key in EXPECTED_LAYOUT:
            assert torch.equal(stored[i].get(key), batch.get(key)), (i, key)


@pytest.mark.timeout(60)
def test_policy_factory_is_used(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert collect(out, "--policy", f"{POLICIES}:always_zero", frames=512) == 0
    stored = TensorDict.load_memmap(out)
    assert stored.numel() == 512
    assert (stored["action"] == 0).all()
    # pushing CartPole left every step ends episodes in about 10 steps
    assert stored["next", "terminated"].any()
    assert json.loads((out / "run.json").read_text())["policy"] == f"{POLICIES}:always_zero"


@pytest.mark.timeout(60)
def test_inspect_prints_layout_frames_and_episodes(tmp_path: Path, capsys: Capsys) -> None:
    """inspect: the layout, the episodes counted as the summary and run.json count them, and the
    exact command that made the run, quoted so that it pastes back."""
    out = tmp_path / "my run"
    assert collect(out, "--workers", "2", "--force", frames=512, num_envs=4) == 0
    summary = capsys.readouterr().out

    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"{out}: 512 frames, batch_size [1, 4, 128] (batches, envs, time)" in text
    assert "next.reward         [1, 4, 128, 1]  torch.float32" in text
    assert "collector.traj_ids  [1, 4, 128]     torch.int64" in text
    assert "observation         [1, 4, 128, 4]  torch.float32" in text
    stored = TensorDict.load_memmap(out)
    ended = int(stored["next", "done"].sum())
    returns = episode_returns(stored)
    assert len(returns) == ended > 0
    episodes = (f"{ended} ended ({ended} terminated, 0 truncated), mean return {sum(returns) / ended:.2f} "
                f"(all {ended}; the last 100: {sum(returns[-100:]) / len(returns[-100:]):.2f})")
    assert f"episodes: {episodes}" in text and f"  episodes   {episodes}" in summary
    record = json.loads((out / "run.json").read_text())
    assert record["episodes"] == ended and record["mean_return"] == pytest.approx(sum(returns) / ended)
    made_by = next(line for line in text.splitlines() if line.startswith("made by:  "))
    assert made_by.endswith(" (complete)")
    assert shlex.split(made_by[len("made by:  "):-len(" (complete)")]) == [
        "rlcollect", "collect", "--env", "CartPole-v1", "--frames", "512", "--num-envs", "4",
        "--out", str(out), "--seed", "0", "--no-progress", "--workers", "2", "--force"]


def episode_returns(stored: TensorDict) -> list[float]:
    """The return of every episode that ended in ``stored`` [batches, envs, T], in the order they
    ended (batch, step, env), by a plain loop."""
    returns, running = [], {}
    for b in range(stored.shape[0]):
        for t in range(stored.shape[2]):
            for env in range(stored.shape[1]):
                frame = stored[b, env, t]
                traj = int(frame["collector", "traj_ids"])
                running[traj] = running.get(traj, 0.0) + float(frame["next", "reward"])
                if bool(frame["next", "done"]):
                    returns.append(running.pop(traj))
    return returns


@pytest.mark.timeout(60)
def test_force_overwrites_a_previous_run(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "run"
    assert collect(out, frames=512, num_envs=4) == 0
    assert collect(out, frames=256, num_envs=2) == 2
    assert "already holds a run; pass --force to overwrite it" in capsys.readouterr().err
    assert collect(out, "--force", frames=256, num_envs=2) == 0
    assert TensorDict.load_memmap(out).batch_size == torch.Size([1, 2, 128])


@pytest.mark.timeout(60)
def test_frames_per_batch_is_rounded_up_to_whole_env_steps(
    tmp_path: Path, capsys: Capsys
) -> None:
    out = tmp_path / "run"
    assert collect(out, "--frames-per-batch", "100", frames=300, num_envs=3) == 0
    err = capsys.readouterr().err
    assert err == "rlcollect: note: --frames-per-batch 100 rounded up to 102, a multiple of --num-envs 3\n"
    assert TensorDict.load_memmap(out).batch_size == torch.Size([3, 3, 34])


@pytest.mark.timeout(60)
def test_ctrl_c_keeps_the_batches_collected_so_far(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "run"
    policy = f"{POLICIES}:interrupt_in_third_batch"
    assert collect(out, "--policy", policy, "--frames-per-batch", "64", frames=640, num_envs=2) == 130
    captured = capsys.readouterr()
    assert "INTERRUPTED after 128 frames" in captured.out
    assert captured.err == f"rlcollect: interrupted; {out} holds the first 2 batches\n"
    info = json.loads((out / "run.json").read_text())
    assert info["complete"] is False and info["batches_written"] == 2 and info["batches_planned"] == 10
    stored = TensorDict.load_memmap(out)  # at its written size: nothing of the 8 batches never collected
    assert stored.batch_size == torch.Size([2, 2, 32]) and (stored["action"] == 0).all()
    assert not (out / ".partial").exists()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"{out}: 128 frames, batch_size [2, 2, 32]" in text
    assert "(INTERRUPTED: 2 of 10 batches written)" in text
    assert collect(out, "--force", frames=64) == 0  # an interrupted run can be overwritten


@pytest.mark.timeout(60)
def test_no_next_obs_stores_less_and_loads_the_same_run(tmp_path: Path, capsys: Capsys) -> None:
    full, lean = tmp_path / "full", tmp_path / "lean"
    assert collect(full, frames=2048) == 0
    assert collect(lean, "--no-next-obs", frames=2048) == 0
    assert "rlcollect.load_run(" in capsys.readouterr().out
    assert ("next", "observation") not in TensorDict.load_memmap(lean).keys(True, True)
    expected, rebuilt = TensorDict.load_memmap(full), rlcollect.load_run(lean)
    assert set(rebuilt.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        assert torch.equal(rebuilt.get(key), expected.get(key)), key
    # the next observations' 32 kB go, but for the ones kept at ~100 episode ends and 16 batch ends
    assert folder_bytes(lean) < folder_bytes(full) - 0.75 * 2048 * 4 * 4
    assert main(["inspect", str(lean)]) == 0
    text = capsys.readouterr().out
    assert "next.observation    [4, 4, 128, 4]  torch.float32" in text
    assert "next observations: rebuilt on load from final_observations/" in text
    assert "--no-next-obs (complete)" in text


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@pytest.mark.timeout(60)
def test_a_run_past_the_size_threshold_is_warned_about_before_it_writes(
    tmp_path: Path, capsys: Capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rlcollect.cli.planning.SIZE_WARNING_BYTES", 100_000)
    out = tmp_path / "run"
    assert collect(out, frames=4096) == 0
    err = capsys.readouterr().err
    assert err.startswith("rlcollect: warning: this run will write about 2") and " kB to " in err, err
    estimate = float(err.split("about ")[1].split(" kB")[0]) * 1000
    assert 0.95 < estimate / folder_bytes(out) < 1.05  # the estimate is what the run wrote
    assert collect(tmp_path / "small", frames=256) == 0
    assert capsys.readouterr().err == ""  # under the threshold: nothing said


@pytest.mark.timeout(60)
def test_an_interrupted_run_holds_only_what_it_wrote(tmp_path: Path, capsys: Capsys) -> None:
    out, planned = tmp_path / "run", 2 * 32 * 1000  # 1,000 batches planned, 2 written
    policy = f"{POLICIES}:interrupt_in_third_batch"
    assert collect(out, "--policy", policy, "--frames-per-batch", "64", frames=planned, num_envs=2) == 130
    capsys.readouterr()
    assert (out / "action.memmap").stat().st_size == 2 * 64 * 8  # int64 actions of 2 batches
    stored = TensorDict.load_memmap(out)
    assert stored.batch_size == torch.Size([2, 2, 32])
    # the episodes counted are those in the folder, not those of the batch the interruption lost
    assert json.loads((out / "run.json").read_text())["episodes"] == len(episode_returns(stored))


# -- bad arguments: one line on stderr, exit status 2 -------------------------------------------


def assert_one_line_error(capsys: Capsys, *fragments: str) -> None:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("rlcollect: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert captured.out == ""


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--frames", "0"], ["argument --frames: must be a positive integer, got '0'"]),
        (["--frames", "-5"], ["argument --frames: must be a positive integer, got '-5'"]),
        (["--frames", "lots"], ["argument --frames: must be a positive integer, got 'lots'"]),
        (["--num-envs", "0"], ["argument --num-envs: must be a positive integer, got '0'"]),
        (["--frames-per-batch", "0"], ["argument --frames-per-batch: must be a positive integer"]),
        (["--seed", "-1"], ["argument --seed: must be an integer >= 0, got '-1'"]),
        (["--bogus"], ["unrecognized arguments: --bogus (see rlcollect --help)"]),
        (["CartPole-v1"], ["unrecognized arguments: CartPole-v1: an env is given as --env CartPole-v1"]),
    ],
)
def test_bad_numbers_and_options(
    tmp_path: Path, capsys: Capsys, args: list[str], fragments: list[str]
) -> None:
    assert main(["collect", "--out", str(tmp_path / "run"), *args]) == 2
    assert_one_line_error(capsys, *fragments)
    assert not (tmp_path / "run").exists()


def test_no_command_and_missing_out(capsys: Capsys) -> None:
    assert main([]) == 2
    assert_one_line_error(capsys, "the following arguments are required: COMMAND")
    assert main(["collect"]) == 2
    assert_one_line_error(capsys, "the following arguments are required: --out")


def test_unknown_env(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "run"
    assert main(["collect", "--env", "NoSuchEnv-v0", "--out", str(out), "--no-progress"]) == 2
    assert_one_line_error(capsys, "--env 'NoSuchEnv-v0' is not a registered Gymnasium env id")
    assert not out.exists()


def test_out_is_a_file(tmp_path: Path, capsys: Capsys) -> None:
    target = tmp_path / "taken"
    target.write_text("not a folder")
    assert collect(target, frames=64) == 2
    assert_one_line_error(capsys, f"--out {str(target)!r} is a file, not a folder")
    assert target.read_text() == "not a folder"


def test_out_is_not_writable(tmp_path: Path, capsys: Capsys) -> None:
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "run"  # a folder below a file can never be created
    assert collect(target, frames=64) == 2
    assert_one_line_error(capsys, f"--out {str(target)!r} is not writable")


def test_non_empty_folder_is_refused_even_with_force(tmp_path: Path, capsys: Capsys) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    assert collect(target, "--force", frames=64) == 2
    assert_one_line_error(capsys, "is a non-empty folder that is not an rlcollect run")
    assert (target / "notes.txt").read_text() == "keep me"


@pytest.mark.timeout(60)
def test_force_deletes_only_what_the_run_wrote(tmp_path: Path, capsys: Capsys) -> None:
    """A run folder holding the user's files: --force refuses it, naming them, and deletes nothing."""
    out = tmp_path / "run"
    assert collect(out, frames=256, num_envs=2) == 0
    (out / "my_notes.txt").write_text("keep me")
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "model.pt").write_bytes(b"weights")
    (out / "next" / "stray.bin").write_bytes(b"x")  # inside a folder the run wrote
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    capsys.readouterr()
    assert collect(out, "--force", frames=128, num_envs=2) == 2
    assert_one_line_error(capsys, "holds a run and files it did not write "
                                  "(checkpoints/model.pt, my_notes.txt, next/stray.bin)")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    for stray in ("my_notes.txt", "checkpoints/model.pt", "next/stray.bin"):
        (out / stray).unlink()
    assert collect(out, "--force", frames=128, num_envs=2) == 0  # then the run's own files go
    assert rlcollect.load_run(out).batch_size == torch.Size([1, 2, 64])
    assert (out / "checkpoints").is_dir()  # an empty folder of the user's is left where it was


def test_an_empty_out_is_refused(tmp_path: Path, capsys: Capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("keep me")
    assert main(["collect", "--env", "CartPole-v1", "--frames", "64", "--out", "", "--no-progress",
                 "--force"]) == 2
    assert_one_line_error(capsys, "--out '' names no folder")
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_a_folder_left_by_a_run_killed_before_its_first_write(tmp_path: Path) -> None:
    """Killed between making the folder and writing to it: it holds the write test's file at most.
    Loading it says there is no run; a new run takes it as an empty folder."""
    target = tmp_path / "run"
    target.mkdir()
    (target / WRITE_TEST).touch()
    with pytest.raises(ValueError, match="holds no run: no committed batches"):
        rlcollect.load_run(target)
    assert collect(target, frames=64) == 0
    assert rlcollect.load_run(target).numel() == 64


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ("no_colon_here", ["--policy 'no_colon_here': expected the form pkg.module:factory"]),
        ("no_such_module_for_rlcollect:make", ["cannot import module 'no_such_module_for_rlcollect'",
                                               "ModuleNotFoundError"]),
        (f"{POLICIES}:missing", [f"module '{POLICIES}' has no attribute 'missing'"]),
        (f"{POLICIES}:NOT_CALLABLE", ["'NOT_CALLABLE' is a int, not a callable factory"]),
        (f"{POLICIES}:broken_factory", ["the factory raised RuntimeError: this factory needs a GPU"]),
        (f"{POLICIES}:wrong_shape", [f"--policy '{POLICIES}:wrong_shape'", "does not fit action space"]),
    ],
)
def test_bad_policy(tmp_path: Path, capsys: Capsys, spec: str, fragments: list[str]) -> None:
    out = tmp_path / "run"
    assert collect(out, "--policy", spec, frames=64) == 2
    assert_one_line_error(capsys, *fragments)
    assert not out.exists()


def test_inspect_of_something_else(tmp_path: Path, capsys: Capsys) -> None:
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert_one_line_error(capsys, "is not a folder")
    assert main(["inspect", str(tmp_path)]) == 2
    assert_one_line_error(capsys, "is not a saved TensorDict folder (no meta.json)")


# -- the command as a user runs it ------------------------------------------------------------


@pytest.mark.timeout(120)
def test_command_in_a_subprocess(tmp_path: Path) -> None:
    out = tmp_path / "run"
    collect_cmd = [sys.executable, "-m", "rlcollect.cli.main", "collect", "--frames", "2000",
                   "--num-envs", "8", "--out", str(out), "--seed", "0",
                   "--policy", f"{POLICIES}:always_zero"]
    # run from the repository root: modules in the current directory can be named by --policy
    done = subprocess.run(collect_cmd, cwd=REPO, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    assert f"collected 2,048 frames of CartPole-v1 (8 envs, policy: {POLICIES}:always_zero)" in done.stdout
    stored = TensorDict.load_memmap(out)
    assert stored.batch_size == torch.Size([2, 8, 128])
    assert (stored["action"] == 0).all()

    inspect_cmd = [sys.executable, "-m", "rlcollect.cli", "inspect", str(out)]
    done = subprocess.run(inspect_cmd, cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    assert "2,048 frames, batch_size [2, 8, 128]" in done.stdout

    bad_cmd = [sys.executable, "-m", "rlcollect.cli", "collect", "--out", str(out), "--frames", "0"]
    bad = subprocess.run(bad_cmd, cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert bad.returncode == 2
    assert bad.stderr.startswith("rlcollect: error: argument --frames") and bad.stderr.count("\n") == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "envpool:CartPole-v1"])
def test_env_ids_the_collectors_take_work_in_the_cli(env_id: str, tmp_path: Path, capsys: Capsys) -> None:
    """``ALE/...`` ids (ale-py's namespace, registered on demand) and ``envpool:...`` ids: the CLI
    builds envs as the collectors do."""
    pytest.importorskip("ale_py" if env_id.startswith("ALE/") else "envpool")
    out = tmp_path / "run"
    argv = ["collect", "--env", env_id, "--frames", "64", "--num-envs", "2", "--out", str(out), "--seed", "0",
            "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    stored = TensorDict.load_memmap(out)
    assert stored.numel() == 64
    assert json.loads((out / "run.json").read_text())["env"] == env_id
    if env_id.startswith("ALE/"):
        observation = stored["observation"]
        assert observation.shape[-3:] == (210, 160, 3) and observation.dtype == torch.uint8


HELP_PROBE = """
import sys, time
start = time.perf_counter()
from rlcollect.cli.main import main
try:
    main(["--help"])
except SystemExit:
    pass
print("HEAVY", sorted(m for m in ("torch", "tensordict", "gymnasium", "numpy") if m in sys.modules))
print("SECONDS", time.perf_counter() - start)
"""


def test_help_in_a_fresh_process_imports_nothing_heavy_and_takes_under_a_second() -> None:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    assert "usage: rlcollect" in done.stdout
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines()
                 if line.startswith(("HEAVY", "SECONDS")))
    assert lines["HEAVY"] == "[]"  # the commands' imports wait until a command runs
    assert wall < 1.0, f"rlcollect --help took {wall:.2f} s in a fresh process"


@pytest.mark.timeout(60)
def test_env_kwargs_reach_gymnasium_make(tmp_path: Path, capsys: Capsys) -> None:
    """``--env-kwargs max_episode_steps=5``: every episode of the run is truncated at 5 steps."""
    out = tmp_path / "run"
    assert collect(out, "--env-kwargs", "max_episode_steps=5", "sutton_barto_reward=True", frames=200) == 0
    run = TensorDict.load_memmap(out)
    truncated, terminated = run["next", "truncated"][..., 0], run["next", "terminated"][..., 0]
    steps = run["collector", "traj_ids"]  # one id per episode: no episode is longer than 5 steps
    assert int(torch.unique(steps, return_counts=True)[1].max()) <= 5
    assert bool(truncated.any()) and not bool((truncated & terminated).any())
    setup = json.loads((out / "run.json").read_text())
    assert setup["env_kwargs"] == {"max_episode_steps": "5", "sutton_barto_reward": "True"}
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--env-kwargs", "no_such_option=1"], ["--env 'CartPole-v1' cannot be made with --env-kwargs "
                                                "no_such_option=1", "TypeError"]),
        (["--env-kwargs", "frameskip"], ["--env-kwargs", "expected KEY=VALUE", "'frameskip'"]),
        (["--device", "not-a-device"], ["--device 'not-a-device' is not a torch device"]),
        (["--policy", f"{POLICIES}:float64_input"],
         [f"--policy '{POLICIES}:float64_input' failed on CartPole-v1's observations", "Box(",
          "RuntimeError", "dtype"]),
    ],
)
def test_env_kwargs_device_and_policy_failures_are_one_line(
    tmp_path: Path, capsys: Capsys, argv: list[str], fragments: list[str]
) -> None:
    out = tmp_path / "run"
    assert collect(out, *argv, frames=64) == 2
    assert_one_line_error(capsys, *fragments)
    assert not out.exists()


@pytest.mark.timeout(60)
def test_device_runs_the_policy_there(tmp_path: Path, capsys: Capsys) -> None:
    """``--device cpu`` collects; ``--device cuda`` collects where CUDA is, and is one line where not."""
    assert collect(tmp_path / "cpu", "--device", "cpu", "--policy", f"{POLICIES}:always_zero", frames=64) == 0
    assert (TensorDict.load_memmap(tmp_path / "cpu")["action"] == 0).all()
    capsys.readouterr()
    status = collect(tmp_path / "cuda", "--device", "cuda", "--policy", f"{POLICIES}:always_zero", frames=64)
    if torch.cuda.is_available():
        assert status == 0
    else:
        assert status == 2
        assert_one_line_error(capsys, "--device 'cuda': this machine has no CUDA device")


@pytest.mark.timeout(60)
def test_obs_dtype_stores_observations_in_that_dtype(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "run"
    assert collect(out, "--obs-dtype", "float64", frames=64) == 0
    run = TensorDict.load_memmap(out)
    assert run["observation"].dtype == run["next", "observation"].dtype == torch.float64
    assert json.loads((out / "run.json").read_text())["obs_dtype"] == "float64"
    capsys.readouterr()
    assert collect(tmp_path / "bad", "--obs-dtype", "int8", frames=64) == 2
    assert_one_line_error(capsys, "--obs-dtype", "invalid choice: 'int8'")


@pytest.mark.timeout(60)
def test_info_keys_store_the_steps_infos(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "run"
    argv = ["collect", "--env", "FrozenLake-v1", "--frames", "64", "--num-envs", "2", "--out", str(out),
            "--seed", "0", "--no-progress", "--info-keys", "prob"]
    assert main(argv) == 0
    summary = capsys.readouterr().out
    assert "; mean at their last steps: prob 0.33" in summary, summary
    run = rlcollect.load_run(out)
    prob = run["next", "info", "prob"]  # a slippery lake: each move happens with probability 1/3
    assert prob.dtype == torch.float64 and prob.shape == (1, 2, 32)
    assert torch.allclose(prob, torch.tensor(1 / 3, dtype=torch.float64))
    record = json.loads((out / "run.json").read_text())
    assert record["info_keys"] == ["prob"] and record["command"].endswith("--info-keys prob")
    assert record["info_means_at_episode_ends"]["prob"] == pytest.approx(1 / 3)
    assert main(["inspect", str(out)]) == 0
    assert "; mean at their last steps: prob 0.33" in capsys.readouterr().out
    assert main([*argv[:-1], "lives", "--force"]) == 2
    assert_one_line_error(capsys, "info_keys=['lives']: ['lives'] not in the info", "(its keys: ['prob'])")


@pytest.mark.timeout(60)
def test_bad_data_mid_run_is_one_line_and_keeps_the_batches_before_it(tmp_path: Path, capsys: Capsys) -> None:
    out = tmp_path / "run"
    policy = f"{POLICIES}:float_actions_in_third_batch"
    assert collect(out, "--policy", policy, "--frames-per-batch", "64", frames=640, num_envs=2) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("rlcollect: error: the action at step 5 of batch 2 "), lines
    assert "float32" in lines[0] and f"{out} holds the first 2 batches" in lines[0]
    info = json.loads((out / "run.json").read_text())
    assert info["complete"] is False and info["batches_written"] == 2
    stored = TensorDict.load_memmap(out)
    assert stored.batch_size == torch.Size([2, 2, 32]) and (stored["action"] == 0).all()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", [["--policy", f"{POLICIES}:tilt"], []], ids=["tilt", "random"])
def test_workers_store_what_one_process_stores(tmp_path: Path, capsys: Capsys, policy: list[str]) -> None:
    """``--workers 2 --envs-per-worker 2`` (a MultiSyncCollector) writes the same run as ``--num-envs
    4`` in one process, trajectory ids aside (each collector numbers them in its own space), with a
    policy and with the default random actions (each env draws them from a stream of its own)."""
    assert collect(tmp_path / "one", *policy, frames=512, num_envs=4) == 0
    argv = ["collect", "--env", "CartPole-v1", "--frames", "512", "--workers", "2", "--envs-per-worker", "2",
            "--out", str(tmp_path / "two"), "--seed", "0", "--no-progress", *policy]
    assert main(argv) == 0
    assert "(4 envs in 2 workers, policy:" in capsys.readouterr().out
    one, two = (TensorDict.load_memmap(tmp_path / name) for name in ("one", "two"))
    assert two.batch_size == one.batch_size == torch.Size([1, 4, 128])
    assert (one.exclude(("collector", "traj_ids")) == two.exclude(("collector", "traj_ids"))).all()
    assert json.loads((tmp_path / "two" / "run.json").read_text())["workers"] == 2


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--workers", "3"], "--num-envs 8 cannot be split evenly over --workers 3"),
        (["--workers", "2", "--envs-per-worker", "3", "--num-envs", "4"],
         "--num-envs 4 is not --workers 2 x --envs-per-worker 3"),
    ],
)
def test_worker_counts_that_do_not_agree(
    tmp_path: Path, capsys: Capsys, argv: list[str], fragment: str
) -> None:
    out = tmp_path / "run"
    full = ["collect", "--env", "CartPole-v1", "--frames", "64", "--out", str(out), "--no-progress", *argv]
    assert main(full) == 2
    assert_one_line_error(capsys, fragment)
    assert not out.exists()
