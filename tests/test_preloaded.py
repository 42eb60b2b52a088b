"""The helper that runs documentation blocks and commands in a fork of a preloaded interpreter
(:mod:`tests.preloaded`) behaves as ``python script.py`` does where the tests rely on it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.preloaded import Preloaded

MAIN = """
import multiprocessing, os, sys
print(__name__, sys.argv[1:], sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
print(os.getcwd(), os.environ.get("PRELOADED_PROBE"), multiprocessing.parent_process())
print("torch" in sys.modules, os.getpgid(0) == os.getpid())
"""


@pytest.mark.timeout(60)
def test_a_script_runs_as_main_in_its_folder_with_its_arguments(preloaded: Preloaded, tmp_path: Path) -> None:
    script = tmp_path / "main.py"
    script.write_text(MAIN)
    env = {**os.environ, "PRELOADED_PROBE": "seen"}
    done = preloaded.run([str(script), "a", "b"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["__main__ ['a', 'b'] True", f"{tmp_path} seen None", "True True"]
    plain = subprocess.run([sys.executable, str(script), "a", "b"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert plain.stdout.splitlines()[:2] == done.stdout.splitlines()[:2]  # as a new interpreter


@pytest.mark.timeout(60)
def test_what_the_imports_write_into_the_environment_stays(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Gymnasium's import sets ``PYGAME_HIDE_SUPPORT_PROMPT`` (pygame's banner would go to stdout):
    a run given an environment without it finds it set, as a new interpreter importing Gymnasium."""
    monkeypatch.delenv("PYGAME_HIDE_SUPPORT_PROMPT", raising=False)
    code = "import os, gymnasium; print(os.environ.get('PYGAME_HIDE_SUPPORT_PROMPT'))"
    with Preloaded(preload=("gymnasium",)) as python:  # started without it, as a new interpreter is
        done = python.run(["-c", code], cwd=tmp_path, env=dict(os.environ))
    assert done.stdout == "hide\n", done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("code", "status", "stderr"), [
    ("raise SystemExit(3)", 3, ""),
    ("import sys; sys.exit('went wrong')", 1, "went wrong\n"),
    ("1 / 0", 1, "ZeroDivisionError: division by zero\n"),
    ("import atexit; atexit.register(print, 'at exit')", 0, ""),  # stdout: "at exit" both
])
def test_exit_status_and_messages_are_a_new_interpreters(preloaded: Preloaded, tmp_path: Path, code: str,
                                                         status: int, stderr: str) -> None:
    done = preloaded.run(["-c", code], cwd=tmp_path)
    plain = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    assert done.returncode == plain.returncode == status
    assert done.stdout == plain.stdout
    assert done.stderr.endswith(stderr) and plain.stderr.endswith(stderr)
    assert done.stderr == plain.stderr  # the traceback holds the code's own frames only


@pytest.mark.timeout(60)
def test_a_module_runs_with_minus_m(preloaded: Preloaded, tmp_path: Path) -> None:
    done = preloaded.run(["-m", "rlcollect.cli", "--version"], cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("rlcollect "), (done.stdout, done.stderr)


@pytest.mark.timeout(90)
def test_spawned_workers_import_the_script_as_main(preloaded: Preloaded, tmp_path: Path) -> None:
    (tmp_path / "spawning.py").write_text(textwrap.dedent("""
        import multiprocessing

        def square(x):
            return x * x

        if __name__ == "__main__":
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                print(pool.map(square, [1, 2, 3]))
    """))
    done = preloaded.run([str(tmp_path / "spawning.py")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[1, 4, 9]\n"


@pytest.mark.timeout(60)
def test_a_time_out_kills_the_run_and_its_children_and_the_helper_goes_on(preloaded: Preloaded,
                                                                          tmp_path: Path) -> None:
    code = ("import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); print(child.pid, flush=True); time.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired) as stopped:
        preloaded.run(["-c", code], cwd=tmp_path, timeout=3)
    child = int(stopped.value.output)
    for _ in range(100):
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        os.sched_yield()
        subprocess.run(["sleep", "0.05"], check=True)
    else:
        raise AssertionError(f"the timed-out run's child {child} still runs")
    assert preloaded.run(["-c", "print('next')"], cwd=tmp_path).stdout == "next\n"


@pytest.mark.timeout(60)
def test_a_helper_that_dies_is_an_error_then_a_new_one_starts(tmp_path: Path) -> None:
    with Preloaded(preload=("numpy",)) as python:
        with pytest.raises(RuntimeError, match="helper interpreter exited with code -9"):
            python.run(["-c", "import os, signal; os.kill(os.getppid(), signal.SIGKILL)"], cwd=tmp_path)
        assert python.run(["-c", "print(1)"], cwd=tmp_path).stdout == "1\n"
