"""The run folder: a memory-mapped TensorDict ``[num_batches, num_envs, T]`` plus ``run.json``.

Batch ``i`` of the collector is written to index ``i`` of the stored TensorDict, so
``TensorDict.load_memmap(folder)`` gives all batches stacked on a new first dim. ``run.json``
beside it records how the run was made (env, seed, policy, counters); ``load_memmap`` ignores it.
It is written when the run starts and again when it ends, and marks the folder as a run that
``--force`` may overwrite. A run that stops early (Ctrl-C, bad data) is cut to the batches it
wrote, so that it loads at that size; ``run.json`` says it is partial.

Example:
    >>> import tempfile, torch
    >>> from tensordict import TensorDict
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     writer = RunWriter(prepare_out(folder + "/run", force=False), num_batches=2, info={})
    ...     for i in range(2):
    ...         writer.write(TensorDict({"x": torch.full((3, 4), i)}, batch_size=[3, 4]))
    ...     writer.finish({"complete": True})
    ...     print(TensorDict.load_memmap(folder + "/run")["x"][:, 0, 0].tolist())
    [0, 1]
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

from tensordict import TensorDict, TensorDictBase

from rlcollect.cli.errors import CliError, one_line

__all__ = ["RUN_INFO", "RunWriter", "check_out", "load_run", "prepare_out"]

#: The file beside the memmap that records how the run was made.
RUN_INFO = "run.json"


def check_out(path: str | Path, *, force: bool) -> Path:
    """Check, without touching anything, that ``path`` can receive a run.

    ``path`` may be missing, an empty folder, or (with ``force``) a previous run's folder (one
    holding ``run.json``). Any other non-empty folder is refused, ``force`` or not.

    Raises:
        CliError: ``path`` is a file, a non-empty folder other than a run, or a run without ``force``.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CliError(f"--out {str(out)!r} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / RUN_INFO).is_file():
            raise CliError(
                f"--out {str(out)!r} is a non-empty folder that is not an rlcollect run "
                "(no run.json); choose another folder"
            )
        if not force:
            raise CliError(f"--out {str(out)!r} already holds a run; pass --force to overwrite it")
    return out


def prepare_out(path: str | Path, *, force: bool) -> Path:
    """:func:`check_out`, then delete the previous run (with ``force``) and create ``path`` empty.

    Raises:
        CliError: as :func:`check_out`, or ``path`` cannot be removed, created or written.
    """
    out = check_out(path, force=force)
    if out.is_dir() and any(out.iterdir()):
        try:
            shutil.rmtree(out)
        except OSError as error:
            raise CliError(f"--out {str(out)!r}: cannot remove the previous run ({error.strerror})") from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".rlcollect-write-test"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise CliError(f"--out {str(out)!r} is not writable ({error.strerror or error})") from None
    return out


class RunWriter:
    """Writes ``num_batches`` equally shaped batches into a memmap folder, allocated from the first.

    Args:
        out: an empty, writable folder (see :func:`prepare_out`).
        num_batches: the number of batches the run yields (``len(collector)``).
        info: how the run is made, written to ``run.json`` now (with ``"complete": false``).
    """

    def __init__(self, out: Path, num_batches: int, info: dict[str, Any]) -> None:
        self.out = out
        self.num_batches = num_batches
        self.written = 0
        self._info = {**info, "complete": False}
        self._stored: TensorDictBase | None = None
        self._write_info()

    def write(self, batch: TensorDictBase) -> None:
        """Store ``batch`` at the next index (the first call allocates the files)."""
        if self.written >= self.num_batches:
            raise IndexError(f"all {self.num_batches} batches are already written")
        if self._stored is None:
            # [num_batches, num_envs, T]: files of the full size, filled batch by batch
            self._stored = batch.expand(self.num_batches, *batch.shape).memmap_like(self.out)
        self._stored[self.written] = batch
        self.written += 1

    def finish(self, info: dict[str, Any]) -> None:
        """Rewrite ``run.json`` with ``info`` added (counters, ``complete``, ...); a run that
        stopped early is cut to the batches written, so that it loads at its written size."""
        if self._stored is not None and self.written < self.num_batches:
            self._cut_to_written()
        self._info.update(info)
        self._write_info()

    def _cut_to_written(self) -> None:
        """Rewrite the memmap as its first ``written`` batches (a copy of them; the rest goes)."""
        assert self._stored is not None
        partial = self.out / ".partial"
        self._stored[: self.written].memmap(partial, copy_existing=True)
        self._stored = None  # the old files' maps close with it
        for entry in self.out.iterdir():
            if entry.name not in (RUN_INFO, partial.name):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        for entry in partial.iterdir():
            entry.rename(self.out / entry.name)
        partial.rmdir()

    def _write_info(self) -> None:
        record = {**self._info, "batches_planned": self.num_batches, "batches_written": self.written}
        (self.out / RUN_INFO).write_text(json.dumps(record, indent=2) + "\n")


def load_run(path: str | Path) -> tuple[TensorDictBase, dict[str, Any]]:
    """The stored TensorDict of a run folder and its ``run.json`` (``{}`` if there is none).

    Raises:
        CliError: ``path`` is not a saved TensorDict folder.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise CliError(f"{str(folder)!r} is not a folder")
    if not (folder / "meta.json").is_file():
        raise CliError(f"{str(folder)!r} is not a saved TensorDict folder (no meta.json)")
    try:
        stored = TensorDict.load_memmap(folder)
    except Exception as error:  # a damaged folder: say so on one line
        raise CliError(
            f"{str(folder)!r} cannot be loaded ({type(error).__name__}: {one_line(str(error))})"
        ) from None
    info: dict[str, Any] = {}  # stays empty for a TensorDict folder written by something else
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((folder / RUN_INFO).read_text())
    return stored, info
