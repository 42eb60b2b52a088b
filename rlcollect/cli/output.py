"""The run folder: a memory-mapped TensorDict ``[num_batches, num_envs, T]`` plus ``run.json``.

Batch ``i`` of the collector is written to index ``i`` of the stored TensorDict, so
``TensorDict.load_memmap(folder)`` gives all batches stacked on a new first dim. ``run.json``
beside it records how the run was made (env, seed, policy, counters); ``load_memmap`` ignores it.

Example:
    >>> import tempfile, torch
    >>> from tensordict import TensorDict
    >>> folder = tempfile.mkdtemp() + "/run"
    >>> writer = RunWriter(prepare_out(folder, force=False), num_batches=2)
    >>> for i in range(2):
    ...     writer.write(TensorDict({"x": torch.full((3, 4), i)}, batch_size=[3, 4]))
    >>> writer.finish({"env": "demo"})
    >>> TensorDict.load_memmap(folder)["x"][:, 0, 0].tolist()
    [0, 1]
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tensordict import TensorDict, TensorDictBase

from rlcollect.cli.errors import CliError, one_line

__all__ = ["RUN_INFO", "RunWriter", "is_saved_tensordict", "load_run", "prepare_out"]

#: The file beside the memmap that records how the run was made.
RUN_INFO = "run.json"


def is_saved_tensordict(folder: Path) -> bool:
    """Whether ``folder`` holds a TensorDict saved with ``memmap`` (it has ``meta.json``)."""
    return (folder / "meta.json").is_file()


def prepare_out(path: str | Path, *, force: bool) -> Path:
    """Check that ``path`` can receive a run and create it (empty).

    ``path`` may be missing or an empty folder. With ``force``, a previous run there (a saved
    TensorDict folder) is deleted first; any other non-empty folder is refused, ``force`` or not.

    Raises:
        CliError: ``path`` is a file, a non-empty folder, or cannot be created or written.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CliError(f"--out {str(out)!r} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not is_saved_tensordict(out):
            raise CliError(f"--out {str(out)!r} is a non-empty folder that is not an rlcollect run; "
                           "choose another folder")
        if not force:
            raise CliError(f"--out {str(out)!r} already holds a run; pass --force to overwrite it")
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
    """

    def __init__(self, out: Path, num_batches: int) -> None:
        self.out = out
        self.num_batches = num_batches
        self.written = 0
        self._stored: TensorDictBase | None = None

    def write(self, batch: TensorDictBase) -> None:
        """Store ``batch`` at the next index (the first call allocates the files)."""
        if self._stored is None:
            # [num_batches, num_envs, T]: files of the full size, filled batch by batch
            self._stored = batch.expand(self.num_batches, *batch.shape).memmap_like(self.out)
        if self.written >= self.num_batches:
            raise IndexError(f"all {self.num_batches} batches are already written")
        self._stored[self.written] = batch
        self.written += 1

    @property
    def stored(self) -> TensorDictBase | None:
        """The memory-mapped TensorDict (``None`` before the first batch)."""
        return self._stored

    def finish(self, info: dict[str, Any]) -> None:
        """Write ``run.json``: ``info`` plus the numbers of batches planned and written."""
        record = {**info, "batches_planned": self.num_batches, "batches_written": self.written}
        (self.out / RUN_INFO).write_text(json.dumps(record, indent=2) + "\n")


def load_run(path: str | Path) -> tuple[TensorDictBase, dict[str, Any]]:
    """The stored TensorDict of a run folder and its ``run.json`` (``{}`` if there is none).

    Raises:
        CliError: ``path`` is not a saved TensorDict folder.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise CliError(f"{str(folder)!r} is not a folder")
    if not is_saved_tensordict(folder):
        raise CliError(f"{str(folder)!r} is not a saved TensorDict folder (no meta.json)")
    try:
        stored = TensorDict.load_memmap(folder)
    except Exception as error:  # a damaged folder: say so on one line
        raise CliError(
            f"{str(folder)!r} cannot be loaded ({type(error).__name__}: {one_line(str(error))})"
        ) from None
    info_file = folder / RUN_INFO
    info: dict[str, Any] = {}
    if info_file.is_file():
        try:
            info = json.loads(info_file.read_text())
        except (OSError, ValueError):
            info = {}
    return stored, info
