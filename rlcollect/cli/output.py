"""The run folder: a memory-mapped TensorDict ``[num_batches, num_envs, T]`` plus ``run.json``.

Batch ``i`` of the collector is written to index ``i`` of the stored TensorDict, so
``TensorDict.load_memmap(folder)`` gives all batches stacked on a new first dim. The folder grows
by one batch per batch collected (:mod:`rlcollect.data.run_folder`): a run that stops early
(Ctrl-C, bad data, a crash) loads at the size it reached. ``run.json`` beside it records how the
run was made (env, seed, policy, counters) and whether it is complete; ``load_memmap`` ignores
it. It is written when the run starts and again when it ends, and marks the folder as a run
that ``--force`` may overwrite. A run collected with ``--no-next-obs`` is loaded with
:func:`rlcollect.load_run`, which rebuilds the next observations.

Examples:
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

from tensordict import TensorDictBase

from rlcollect.cli.episodes import EPISODE_KEYS, EpisodeTally
from rlcollect.cli.errors import CliError, one_line
from rlcollect.data.run_folder import COMMIT, FINALS, RunFolderWriter, replace_file
from rlcollect.data.run_folder import load_run as load_run_folder

__all__ = ["RUN_INFO", "RunWriter", "check_out", "foreign_files", "load_run", "prepare_out", "run_files"]

#: The file beside the memmap that records how the run was made.
RUN_INFO = "run.json"
#: The file that checks a new run's folder can be written (left there only by a run killed
#: at that instant; such a folder counts as empty).
WRITE_TEST = ".rlcollect-write-test"


def check_out(path: str | Path, *, force: bool) -> Path:
    """Check, without touching anything, that ``path`` can receive a run.

    ``path`` may be missing, an empty folder, or (with ``force``) a previous run's folder (one
    holding ``run.json``). Any other non-empty folder is refused, ``force`` or not.

    Raises:
        CliError: ``path`` is a file, a non-empty folder other than a run, or a run without ``force``.
    """
    if not str(path).strip():
        raise CliError("--out '' names no folder (an empty path would mean the current folder); "
                       "give the folder for the run, e.g. --out runs/cartpole")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CliError(f"--out {str(out)!r} is a file, not a folder")
    if out.is_dir() and any(entry.name != WRITE_TEST for entry in out.iterdir()):
        if not (out / RUN_INFO).is_file():
            raise CliError(
                f"--out {str(out)!r} is a non-empty folder that is not an rlcollect run "
                "(no run.json); choose another folder"
            )
        if not force:
            raise CliError(f"--out {str(out)!r} already holds a run; pass --force to overwrite it")
        foreign = foreign_files(out)
        if foreign:
            shown = ", ".join(str(p.relative_to(out)) for p in foreign[:5])
            more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            raise CliError(f"--out {str(out)!r} holds a run and files it did not write ({shown}{more}); "
                           "--force deletes only a run's own files: move those, or choose another folder")
    return out


def run_files(out: Path) -> set[Path]:
    """The files and folders a run wrote in ``out``: ``run.json``, the commit, the memmap tree its
    ``meta.json`` files describe (next observations' finals included) and the logs ``run.json``
    names; anything else there is someone else's."""
    own = {out / name for name in (RUN_INFO, COMMIT, WRITE_TEST, FINALS)}
    own |= {path.with_name(path.name + ".tmp") for path in set(own)}
    own |= _memmap_tree(out) | _memmap_tree(out / FINALS)
    try:
        logs = json.loads((out / RUN_INFO).read_text()).get("logs")
    except (OSError, ValueError, AttributeError):
        logs = None
    if isinstance(logs, str) and logs and not Path(logs).is_absolute() and ".." not in Path(logs).parts:
        own.add(out / logs)
        own |= set((out / logs).rglob("*"))
    return own


def _memmap_tree(folder: Path) -> set[Path]:
    """``folder``'s ``meta.json`` and what it names (a leaf's ``.memmap``, a sub-TensorDict's folder)."""
    meta = folder / "meta.json"
    try:
        record = json.loads(meta.read_text())
    except (OSError, ValueError):
        return set()
    own = {meta, meta.with_name("meta.json.tmp")}
    for name, entry in record.items() if isinstance(record, dict) else ():
        if not isinstance(entry, dict) or "/" in name or name in ("", ".", ".."):
            continue
        if entry.get("type") == "TensorDict":
            own |= {folder / name} | _memmap_tree(folder / name)
        elif "dtype" in entry:
            own.add(folder / f"{name}.memmap")
    return own


def foreign_files(out: Path) -> list[Path]:
    """The files in ``out`` that its run did not write, in path order (folders are not files: one
    holding none of the run's is left where it is)."""
    own = run_files(out)
    return sorted(path for path in out.rglob("*")
                  if path not in own and (path.is_symlink() or not path.is_dir()))


def prepare_out(path: str | Path, *, force: bool) -> Path:
    """:func:`check_out`, then delete the previous run (with ``force``) and create ``path`` empty.

    Raises:
        CliError: as :func:`check_out`, or ``path`` cannot be removed, created or written.
    """
    out = check_out(path, force=force)
    if out.is_dir() and any(out.iterdir()):  # a previous run, and only its files (check_out)
        try:
            for own in sorted(run_files(out), key=lambda p: len(p.parts), reverse=True):  # deepest first
                if own.is_dir() and not own.is_symlink():
                    shutil.rmtree(own)
                elif own.exists() or own.is_symlink():
                    own.unlink()
        except OSError as error:
            raise CliError(f"--out {str(out)!r}: cannot remove the previous run ({error.strerror})") from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / WRITE_TEST
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise CliError(f"--out {str(out)!r} is not writable ({error.strerror or error})") from None
    return out


class RunWriter:
    """Writes a run's batches into a folder as they come, and its ``run.json`` (see the module docstring).

    Args:
        out: an empty, writable folder (see :func:`prepare_out`).
        num_batches: the number of batches the run is to yield (``len(collector)``).
        info: how the run is made, written to ``run.json`` now (with ``"complete": false``).
        next_obs: store the next observations; ``False`` stores what rebuilds them on load
            (:func:`rlcollect.data.run_folder.load_run`).
        observation_keys: the batches' observation keys (needed with ``next_obs=False``).
    """

    def __init__(
        self,
        out: Path,
        num_batches: int,
        info: dict[str, Any],
        *,
        next_obs: bool = True,
        observation_keys: list[tuple[str, ...]] | None = None,
    ) -> None:
        self.out = out
        self.num_batches = num_batches
        self.observation_keys = [tuple(key) for key in observation_keys or ()]
        self._folder = RunFolderWriter(out, next_obs=next_obs, observation_keys=observation_keys)
        self._info = {**info, "next_obs": "stored" if next_obs else f"rebuilt on load from {FINALS}/",
                      "complete": False}
        self.episodes: EpisodeTally | None = None  # the episodes ended in the frames written
        self._write_info()

    @property
    def written(self) -> int:
        """Batches written so far."""
        return self._folder.batches

    def write(self, batch: TensorDictBase) -> None:
        """Store ``batch`` at the next index: the folder grows by one batch; count its episodes."""
        if self.written >= self.num_batches:
            raise IndexError(f"all {self.num_batches} batches are already written")
        if self.written == 0 and set(EPISODE_KEYS) <= set(batch.keys(include_nested=True, leaves_only=True)):
            self.episodes = EpisodeTally()
        self._folder.append(batch)
        if self.episodes is not None:
            self.episodes.add(batch)

    def finish(self, info: dict[str, Any]) -> None:
        """Close the files and rewrite ``run.json`` with ``info`` added (counters, ``complete``, ...)."""
        self._folder.close()
        self._info.update(info)
        self._write_info()

    def _write_info(self) -> None:
        record = {**self._info, "batches_planned": self.num_batches, "batches_written": self.written}
        replace_file(self.out / RUN_INFO, json.dumps(record, indent=2) + "\n")  # never half written


def load_run(path: str | Path) -> tuple[TensorDictBase, dict[str, Any]]:
    """The stored TensorDict of a run folder (next observations rebuilt if they were left out) and
    its ``run.json`` (``{}`` if there is none).

    Raises:
        CliError: ``path`` is not a saved TensorDict folder.
    """
    folder = Path(path)
    info = read_info(folder)
    try:
        stored = load_run_folder(folder)
    except Exception as error:  # a damaged folder: say so on one line
        raise CliError(
            f"{str(folder)!r} cannot be loaded ({type(error).__name__}: {one_line(str(error))})"
        ) from None
    return stored, info


def read_info(path: str | Path) -> dict[str, Any]:
    """The ``run.json`` of the run folder ``path`` (``{}`` for a TensorDict folder written by
    something else).

    Raises:
        CliError: ``path`` is not a saved TensorDict folder.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise CliError(f"{str(folder)!r} is not a folder")
    if not (folder / "meta.json").is_file() and not (folder / COMMIT).is_file():
        raise CliError(f"{str(folder)!r} is not a saved TensorDict folder (no meta.json)")
    info: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((folder / RUN_INFO).read_text())
    return info
