"""The README and the docs' pages stay true: their code runs as pasted, and their commands exist.

The quick start runs in a new interpreter; the other blocks and the commands in a fork of one that
has imported torch, tensordict, Gymnasium and rlcollect already (:mod:`tests.preloaded`: otherwise
the same, and 3 to 4 s of CPU less each).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.preloaded import Preloaded

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = REPO / "docs" / "pages"


def headings(text: str) -> list[tuple[int, int, str]]:
    """``(offset, level, title)`` of the Markdown headings of ``text``, those in code blocks left out."""
    found, fence, offset = [], False, 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fence = not fence
        match = None if fence else re.match(r"(#+) (.+)", line)
        if match:
            found.append((offset, len(match.group(1)), match.group(2).strip()))
        offset += len(line)
    return found


def section(title: str, page: str = "README.md") -> str:
    """The text of the section ``title`` (a heading of any level) of ``page`` (a path from the
    repository's root), up to the next heading of the same level or higher."""
    text = (REPO / page).read_text()
    found = headings(text)
    starts = [(i, level) for i, (_, level, name) in enumerate(found) if name == title]
    assert len(starts) == 1, f"{page} has no single section titled {title!r}"
    i, level = starts[0]
    end = next((offset for offset, other, _ in found[i + 1:] if other <= level), len(text))
    return text[found[i][0]:end].split("\n", 1)[1]


def python_blocks(text: str) -> list[str]:
    """The python blocks of ``text``, those indented in a list item too (dedented)."""
    found = re.findall(r"^( *)```python\n(.*?)^\1```", text, flags=re.S | re.M)
    return [textwrap.dedent(code) for _, code in found]


def run_block(title: str, tmp_path: Path, page: str = "README.md", which: int = 0, of: int = 1,
              python: Preloaded | None = None) -> list[str]:
    """Run python block ``which`` of the ``of`` blocks of section ``title`` of ``page`` as a script
    (through ``python``, else in a new interpreter); return its output lines."""
    blocks = python_blocks(section(title, page))
    assert len(blocks) == of, f"section {title!r} has {of} python block(s)"
    script = tmp_path / "block.py"
    script.write_text(blocks[which])
    if python is None:
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=170)
    else:
        done = python.run([str(script)], cwd=tmp_path, timeout=170)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.timeout(180)
def test_quick_start_runs_as_pasted(tmp_path: Path) -> None:
    lines = run_block("Quick start", tmp_path)  # a new interpreter
    assert len(lines) == 10 and lines[-1].startswith("batch 9: 10240 frames"), lines


@pytest.mark.timeout(180)
def test_main_module_guard_example_runs(tmp_path: Path, preloaded: Preloaded) -> None:
    title = "Multi-process collection: the main-module guard"
    assert 'if __name__ == "__main__":' in section(title, "docs/pages/collectors.md")
    lines = run_block(title, tmp_path, "docs/pages/collectors.md", python=preloaded)
    assert lines == [f"torch.Size([8, 128]) {1024 * i}" for i in range(1, 5)]


@pytest.mark.timeout(180)
def test_batched_inference_example_runs(tmp_path: Path, preloaded: Preloaded) -> None:
    lines = run_block("Batched inference: `AsyncBatchedCollector`", tmp_path, "docs/pages/collectors.md",
                      python=preloaded)
    assert lines == ["torch.Size([2, 128]) 8"]  # 8 batches, one update after each


@pytest.mark.timeout(180)
def test_command_line_section_runs_as_pasted(tmp_path: Path, preloaded: Preloaded) -> None:
    """The section's commands, then its Python block, in a fresh folder (Minari datasets in it too)."""
    text = section("Command line", "docs/pages/cli.md")
    commands = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    assert len(commands) == 1
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "datasets")}
    for line in commands[0].splitlines():
        assert line.startswith("rlcollect "), line
        argv = ["-m", "rlcollect.cli", *shlex.split(line)[1:]]
        if line.startswith("rlcollect collect"):
            argv.append("--no-progress")
        done = preloaded.run(argv, cwd=tmp_path, env=env, timeout=170)
        assert done.returncode == 0, (line, done.stderr)
    assert (tmp_path / "datasets" / "rlcollect" / "cartpole-random-v0").is_dir()
    blocks = python_blocks(text)
    assert len(blocks) == 1
    (tmp_path / "block.py").write_text(blocks[0])
    done = preloaded.run(["block.py"], cwd=tmp_path, timeout=170)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["torch.Size([20, 8, 128])"]  # as the block's comment says


@pytest.mark.timeout(180)
def test_episode_records_example_runs(tmp_path: Path, preloaded: Preloaded) -> None:
    lines = run_block("Whole episodes", tmp_path, "docs/pages/replay.md", python=preloaded)
    assert len(lines) == 4 and all(" episodes ended, mean return " in line for line in lines), lines


@pytest.mark.timeout(180)
def test_logging_and_video_example_runs(tmp_path: Path, preloaded: Preloaded) -> None:
    lines = run_block("Logging and video", tmp_path, "docs/pages/logging.md", python=preloaded)
    assert [line.split(" frames")[0] for line in lines] == ["1024", "2048", "3072", "4096"], lines
    assert sorted(path.name for path in (tmp_path / "runs" / "videos").glob("*.mp4"))[:2] == [
        "rl-video-episode-0.mp4", "rl-video-episode-10.mp4"]
    assert list((tmp_path / "runs" / "logs").glob("events.out.tfevents.*"))


@pytest.mark.timeout(180)
def test_step_infos_example_prints_what_it_says(tmp_path: Path, preloaded: Preloaded) -> None:
    lines = run_block("The batch", tmp_path, "docs/pages/batch.md", which=1, of=2, python=preloaded)
    assert lines[0] == "torch.bool torch.Size([2, 32])", lines
    assert re.fullmatch(r"success rate [01]\.\d\d over [1-9]\d* episodes", lines[1]), lines


@pytest.mark.timeout(180)
def test_default_vector_env_example_prints_what_it_says(tmp_path: Path, preloaded: Preloaded) -> None:
    lines = run_block("The batch", tmp_path, "docs/pages/batch.md", which=0, of=2, python=preloaded)
    assert lines == ["torch.Size([64, 100]) True"], lines


# (page, section) whose blocks run in a test of their own above (with their output checked)
TESTED_APART = [("README.md", "Quick start"), ("docs/pages/batch.md", "The batch"),
                ("docs/pages/collectors.md", "Multi-process collection: the main-module guard"),
                ("docs/pages/collectors.md", "Batched inference: `AsyncBatchedCollector`"),
                ("docs/pages/replay.md", "Whole episodes"), ("docs/pages/logging.md", "Logging and video"),
                ("docs/pages/cli.md", "Command line")]


def every_block() -> list[tuple[str, str]]:
    """``(where, code)`` of every python block in the README and the docs' pages, but those above."""
    apart = {code for page, title in TESTED_APART for code in python_blocks(section(title, page))}
    blocks = []
    for path in [README, *sorted([*(REPO / "docs").glob("*.md"), *PAGES.glob("*.md")])]:
        text = path.read_text()
        found = headings(text)
        bounds = [(0, ""), *((offset, title) for offset, _, title in found)]  # text before a heading too
        for (start, title), (end, _) in zip(bounds, [*bounds[1:], (len(text), "")], strict=True):
            where = f"{path.relative_to(REPO)}: {title}"
            blocks += [(where, code) for code in python_blocks(text[start:end]) if code not in apart]
    return blocks


def block_params() -> list[Any]:
    """:func:`every_block` as test parameters; a block that starts Ray runs with ``-m ray``."""
    return [pytest.param(where, code, id=where, marks=[pytest.mark.ray] if "RayCollector" in code else [])
            for where, code in every_block()]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("where", "code"), block_params())
def test_every_other_code_block_runs_as_pasted(tmp_path: Path, where: str, code: str,
                                               preloaded: Preloaded) -> None:
    script = tmp_path / "block.py"
    script.write_text(code)
    done = preloaded.run([str(script)], cwd=tmp_path, timeout=280)
    assert done.returncode == 0, f"{where}:\n{code}\n{done.stderr[-3000:]}"


def test_benchmark_commands_and_result_files_exist() -> None:
    """Every ``python -m bench.X`` the README names is a script, every linked result file exists."""
    text = README.read_text()
    scripts = set(re.findall(r"python -m bench\.(\w+)", text))
    assert {"single_process", "multi_process", "ray"} <= scripts
    for script in scripts:
        assert (REPO / "bench" / f"{script}.py").is_file(), f"README names bench.{script}: no such script"
    for link in re.findall(r"\]\((bench/[^)]+)\)", text):
        assert (REPO / link).exists(), f"README links {link}, which does not exist"


def test_make_targets_named_in_readme_exist() -> None:
    makefile = (REPO / "Makefile").read_text()
    for target in re.findall(r"^make (\w+)", README.read_text(), flags=re.M):
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"Makefile has no target {target!r}"


def test_readme_is_a_front_page() -> None:
    """At most 300 lines, with the quick start's Python in its first 60; every page it links exists."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, len(lines)
    assert "```python" in lines[:60]
    for link in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (REPO / link).is_file(), f"README links {link}, which does not exist"
