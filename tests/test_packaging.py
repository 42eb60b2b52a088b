"""The package as users install it: a wheel that carries ``py.typed``, so their mypy reads our hints."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

USER_SCRIPT = textwrap.dedent("""\
    from rlcollect import Collector, ReplayBuffer

    collector = Collector("CartPole-v1", frames_per_batch=64, total_frames=128)
    frames: int = collector.frames_per_batch
    buffer = ReplayBuffer(capacity=1000)
    wrong: str = collector.frames_per_batch
""")


@pytest.mark.packaging
@pytest.mark.timeout(300)
def test_a_user_script_type_checks_against_the_installed_wheel(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: a build in the checkout would leave build/ there, and reuse it
    shutil.copytree(REPO / "rlcollect", source / "rlcollect", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(source)], check=True, capture_output=True, timeout=240)
    (wheel,) = wheels.glob("rlcollect-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "rlcollect/py.typed" in archive.namelist()
        # installed as pip would: the wheel's files in a site-packages of their own, next to the
        # dependencies of this environment (a .pth line, which mypy follows too)
        environment = tmp_path / "env"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(environment)], check=True,
                       timeout=60)
        (packages,) = environment.glob("lib/python*/site-packages")
        archive.extractall(packages)
    (packages / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(environment / "bin" / "python"),
         "--strict", "--no-incremental", "--no-error-summary", str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    # under --strict, one error, on the line that is wrong: mypy knows what frames_per_batch is, and
    # nothing about the package itself is missing (no "missing library stubs or py.typed marker")
    assert done.stdout.splitlines() == [
        f'{script.name}:6: error: Incompatible types in assignment (expression has type "int", '
        'variable has type "str")  [assignment]'
    ], done.stdout + done.stderr


@pytest.mark.packaging
@pytest.mark.timeout(300)
def test_a_user_script_type_checks_against_the_editable_install(tmp_path: Path) -> None:
    """The README's install (``make venv``: an editable install) from a folder outside the checkout:
    mypy --strict finds rlcollect and its hints, and reports the user's one error, nothing else."""
    venv_python = REPO / ".venv" / "bin" / "python"
    if not venv_python.exists():
        pytest.skip("no .venv: run make venv (the README's install) first")
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(venv_python), "--strict",
         "--no-incremental", "--no-error-summary", script.name],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    assert done.stdout.splitlines() == [
        f'{script.name}:6: error: Incompatible types in assignment (expression has type "int", '
        'variable has type "str")  [assignment]'
    ], done.stdout + done.stderr


USER_LOOP = textwrap.dedent("""\
    import torch

    from rlcollect import Collector, MultiAsyncCollector


    def rewards(collector: Collector | MultiAsyncCollector) -> list[float]:
        sums = []
        for batch in collector:
            steps: torch.Size = batch.batch_size
            sums.append(float(batch["next", "reward"].sum()) / steps.numel())
        return sums
""")


@pytest.mark.packaging
@pytest.mark.timeout(300)
def test_loops_over_batches_type_check_as_written(tmp_path: Path) -> None:
    """A loop over a collector's batches, and the README's quick start, under mypy --strict from a
    user's folder: no error is rlcollect's (the batches are typed as TensorDicts, not ``| None``);
    the quick start's only errors are torch.distributions', which has no type hints."""
    from tests.test_readme import python_blocks, section

    (tmp_path / "loop.py").write_text(USER_LOOP)
    (tmp_path / "quick_start.py").write_text(python_blocks(section("Quick start"))[0])
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(REPO / ".venv" / "bin" / "python"),
         "--strict", "--no-incremental", "--no-error-summary", "loop.py", "quick_start.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    assert not [line for line in errors if line.startswith("loop.py")], done.stdout
    torch_untyped = ('Call to untyped function "sample"', 'Call to untyped function "log_prob"',
                     'Returning Any from function declared to return "Tensor"')
    assert all(any(words in line for words in torch_untyped) for line in errors), done.stdout
