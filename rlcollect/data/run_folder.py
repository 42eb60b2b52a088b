"""A run folder: batches appended to a memory-mapped TensorDict ``[batches, envs, T]`` as they come.

The folder is TensorDict's own memmap format, so ``TensorDict.load_memmap(folder)`` opens it; it
grows by one batch per :meth:`RunFolderWriter.append`, so nothing is allocated for batches that
are never collected.

A batch lands in three moves, and the folder loads at every instant between them:

1. its bytes are written after the committed rows of each leaf's file (at a computed offset, so a
   write cut short is overwritten by the next one, never appended after);
2. the commit: ``committed.json`` (the number of batches, and of final-observation rows) is
   written beside the old one and renamed over it, one atomic step;
3. the ``meta.json`` files are brought up to the commit, each replaced atomically.

:func:`load_run` reads ``committed.json`` and only the committed rows, whatever the state of the
files after it: a process killed at any instant (SIGKILL included) leaves the batches committed
before it, and loses at most the batch it was writing. ``TensorDict.load_memmap`` reads the
``meta.json`` files: exact once step 3 is done, which is every moment but the few renames of
step 3 itself.

Without the next observations (``next_obs=False``) the folder holds each step's observation and,
in ``final_observations/``, only the next observations the following step does not hold: those
of the steps where an episode ended (the true final ones) and of each batch's last step.
:func:`load_run` rebuilds ``("next", <observation key>)`` from the two, value for value.

Examples:
    >>> import tempfile, torch
    >>> from tensordict import TensorDict
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     writer = RunFolderWriter(folder)
    ...     for i in range(3):
    ...         writer.append(TensorDict({"x": torch.full((2, 4), i)}, batch_size=[2, 4]))
    ...     writer.close()
    ...     print(TensorDict.load_memmap(folder)["x"][:, 0, 0].tolist(), load_run(folder).batch_size)
    [0, 1, 2] torch.Size([3, 2, 4])
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase

from rlcollect.common.memmap_folder import load_memmap, read_json, refuse_pickles

__all__ = ["COMMIT", "FINALS", "WHERE", "RunFolderWriter", "leaf_dtype", "load_rows", "load_run",
           "read_commit", "rebuild_next_observations", "replace_file"]

#: The sub-folder of a run without next observations that holds the ones that cannot be rebuilt.
FINALS = "final_observations"
#: The file whose atomic replacement commits a batch: what a loader may read.
COMMIT = "committed.json"
_FORMAT = 1  # the version of committed.json's content
WHERE = ("batch", "env", "step")  # the index of each final observation in the run
Key = tuple[str, ...]


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in one atomic step: a new file beside it, renamed over it."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


class _AppendingMemmap:
    """A memmap TensorDict folder grown along its first dim: rows are written first
    (:meth:`write`), then made visible (:meth:`commit`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.length = 0  # committed rows
        self._leaves: dict[Key, tuple[Path, int]] = {}  # key -> (file, bytes per row)
        self._metas: list[Path] = []  # the meta.json of the folder and of each nested TensorDict

    def write(self, data: TensorDictBase) -> int:
        """Write ``data`` (``[n, ...]``, the same keys, shapes and dtypes every time) after the
        committed rows; return the row count it makes, for :meth:`commit`."""
        if not self._leaves:
            self._create(data)
        rows = data.shape[0]
        for key, (path, row_bytes) in self._leaves.items():
            value = np.ascontiguousarray(data.get(key).numpy(force=True)).data.cast("B")
            if len(value) != rows * row_bytes:
                raise ValueError(f"{key} has {len(value)} bytes for {rows} rows, the folder holds "
                                 f"{row_bytes} bytes per row (every batch must have the same shapes)")
            _write_at(path, self.length * row_bytes, value)
        return int(self.length) + int(rows)

    def _create(self, data: TensorDictBase) -> None:
        """The folder's format from ``data`` without its rows (tensordict's own writer, which makes
        no file for an empty leaf), and an empty file per leaf."""
        data[:0].memmap(self.folder)
        for key in data.keys(include_nested=True, leaves_only=True):
            key = (key,) if isinstance(key, str) else tuple(key)
            value = data.get(key)
            path = self.folder.joinpath(*key[:-1], f"{key[-1]}.memmap")
            path.touch()
            self._leaves[key] = (path, value[:1].numel() * value.element_size())
            for depth in range(len(key)):
                meta = self.folder.joinpath(*key[:depth], "meta.json")
                if meta not in self._metas:
                    self._metas.append(meta)
        missing = [meta for meta in self._metas if not meta.is_file()]
        if missing:
            raise RuntimeError(f"tensordict wrote no {missing[0]}: its memmap format changed")

    def commit(self, length: int) -> None:
        """Make ``length`` rows visible in the ``meta.json`` files (each replaced atomically)."""
        self.length = length
        for meta in self._metas:
            record = json.loads(meta.read_text())
            record["shape"][0] = length
            for entry in record.values():
                if isinstance(entry, dict) and "shape" in entry:
                    entry["shape"][0] = length
            replace_file(meta, json.dumps(record))


def _write_at(path: Path, offset: int, data: memoryview) -> None:
    """``data`` into ``path`` from ``offset`` on; a full disk is an ``OSError`` naming both."""
    descriptor = os.open(path, os.O_WRONLY)
    try:
        written = 0
        while written < len(data):
            written += os.pwrite(descriptor, data[written:], offset + written)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise OSError(error.errno, f"no space left for {path}: {len(data):,} bytes needed at offset "
                                   f"{offset:,} ({os.strerror(error.errno)})", str(path)) from None
    finally:
        os.close(descriptor)


class RunFolderWriter:
    """Appends equally shaped batches ``[envs, T]`` to a memmap folder (see the module docstring).

    Args:
        folder: an existing, empty folder.
        next_obs: store ``("next", <observation key>)``; ``False`` stores only what
            :func:`load_run` needs to rebuild them (``final_observations/``).
        observation_keys: the observation keys of the batches (needed with ``next_obs=False``).
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        next_obs: bool = True,
        observation_keys: list[tuple[str, ...]] | None = None,
    ) -> None:
        if not next_obs and not observation_keys:
            raise ValueError("next_obs=False needs observation_keys, the keys to rebuild")
        self.folder = Path(folder)
        self.next_obs = next_obs
        self.observation_keys = [tuple(k) for k in observation_keys or ()]
        self.batches = 0
        self._main = _AppendingMemmap(self.folder)
        self._finals = _AppendingMemmap(self.folder / FINALS) if not next_obs else None
        self._commit()  # zero batches: the folder is a run that loads from now on

    def append(self, batch: TensorDictBase) -> None:
        """Store ``batch`` (``[envs, T]``) as the next index of the folder: its rows first, then
        the commit (see the module docstring). An exception before the commit (a full disk)
        leaves the folder at its previous batch, and the writer ready to append it again."""
        main_rows = self._main.write(batch.exclude(*self._left_out()).unsqueeze(0))
        final_rows = self._finals.write(self._final_observations(batch)) if self._finals else 0
        self.batches += 1
        self._commit(main_rows, final_rows)

    def _left_out(self) -> list[tuple[str, ...]]:
        return [] if self.next_obs else [("next", *key) for key in self.observation_keys]

    def _final_observations(self, batch: TensorDictBase) -> TensorDictBase:
        keep = batch.get(("next", "done")).reshape(batch.shape).clone()
        keep[:, -1] = True  # a batch's last next observation is not in the folder either
        envs, steps = keep.nonzero(as_tuple=True)
        where = {"batch": torch.full_like(envs, self.batches), "env": envs, "step": steps}
        finals = TensorDict(where, batch_size=[len(envs)])
        for key in self.observation_keys:
            finals.set(key, batch.get(("next", *key))[envs, steps])
        return finals

    def _commit(self, main_rows: int = 0, final_rows: int = 0) -> None:
        record = {"format": _FORMAT, "batches": self.batches, FINALS: final_rows if self._finals else None}
        replace_file(self.folder / COMMIT, json.dumps(record))
        if main_rows:
            self._main.commit(main_rows)
        if self._finals is not None and final_rows:
            self._finals.commit(final_rows)

    def close(self) -> None:
        """Nothing is held open between batches: the folder stays as written."""


def read_commit(folder: str | Path) -> dict[str, Any] | None:
    """The commit record of a run folder, or ``None`` for a folder without one (written by
    ``TensorDict.memmap`` or before rlcollect committed its batches)."""
    path = Path(folder) / COMMIT
    if not path.is_file():
        return None
    record = read_json(path)
    if record.get("format") != _FORMAT:
        raise ValueError(f"{path} has format {record.get('format')!r}; this rlcollect reads format {_FORMAT}")
    return dict(record)


def load_rows(folder: Path, rows: int) -> TensorDictBase:
    """The first ``rows`` rows of a memmap folder, from its ``meta.json`` files with the first dim
    set to ``rows`` (they may say more or fewer while a batch is being committed)."""
    if not (folder / "meta.json").is_file():  # no batch was ever written
        if rows:
            raise ValueError(f"{folder} commits {rows} rows but has no meta.json")
        return TensorDict(batch_size=[0])
    meta = read_json(folder / "meta.json")
    entries: dict[str, Any] = {}
    for name, entry in meta.items():
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "TensorDict":
            entries[name] = load_rows(folder / name, rows)
        elif "dtype" in entry:
            entries[name] = _load_leaf(folder / f"{name}.memmap", entry, rows)
        else:  # a non-tensor leaf (TensorDict pickles some): a run folder holds none
            raise ValueError(f"{folder / 'meta.json'}: entry {name!r} is a {entry.get('type')!r}, not a "
                             "tensor; a run folder holds tensors only")
    return TensorDict(entries, batch_size=[rows, *meta["shape"][1:]])


def leaf_dtype(entry: dict[str, Any], path: Path) -> torch.dtype:
    """The torch dtype a ``meta.json`` entry names for the leaf ``path`` (never another attribute)."""
    dtype = getattr(torch, str(entry["dtype"]).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{path}: dtype {entry['dtype']!r} in meta.json is not a torch dtype")
    return dtype


def _load_leaf(path: Path, entry: dict[str, Any], rows: int) -> torch.Tensor:
    dtype = leaf_dtype(entry, path)
    shape = torch.Size([rows, *entry["shape"][1:]])
    needed = shape.numel() * torch.empty((), dtype=dtype).element_size()
    held = path.stat().st_size if path.is_file() else 0
    if held < needed:  # mapping past a file's end would crash on the first read
        raise ValueError(f"{path} holds {held:,} bytes; the {rows} committed rows need {needed:,}")
    if not needed:
        return torch.empty(shape, dtype=dtype)
    return cast(torch.Tensor, MemoryMappedTensor.from_filename(path, dtype=dtype, shape=shape))


def rebuild_next_observations(stored: TensorDictBase, finals: TensorDictBase) -> TensorDictBase:
    """``stored`` (``[batches, envs, T]`` without next observations) with them rebuilt in memory:
    step ``t``'s is step ``t + 1``'s observation, or the one ``finals`` holds for ``(batch, env, t)``."""
    batch, env, step = (finals.get(name) for name in WHERE)
    rebuilt = stored.copy()  # a new TensorDict over the same (memory-mapped) tensors
    if rebuilt.is_locked:
        rebuilt.unlock_()
    for key in finals.exclude(*WHERE).keys(include_nested=True, leaves_only=True):
        key = (key,) if isinstance(key, str) else tuple(key)
        obs = stored.get(key)
        next_obs = torch.empty_like(obs, device="cpu")
        next_obs[:, :, :-1] = obs[:, :, 1:]
        next_obs[batch, env, step] = finals.get(key)
        rebuilt.set(("next", *key), next_obs)
    return rebuilt


def load_run(folder: str | Path) -> TensorDictBase:
    """The committed batches of a run folder, ``[batches, envs, T]``, with every key a collector writes.

    Only what ``committed.json`` commits is read (memory-mapped), so a folder whose writer was
    killed at any instant loads with the batches before the one it was writing. A folder without
    ``committed.json`` (any TensorDict memmap folder) is read with
    :func:`~rlcollect.common.memmap_folder.load_memmap` (a pickled leaf is refused, never unpickled).
    A folder written without the next observations gets them rebuilt in memory
    (:func:`rebuild_next_observations`).

    Raises:
        ValueError: the folder's files hold fewer bytes than it commits (damaged after its run),
            or it holds no run at all (its writer stopped before writing anything).

    Examples:
        >>> import tempfile, torch
        >>> from rlcollect import Collector
        >>> with tempfile.TemporaryDirectory() as folder, Collector(
        ...         "CartPole-v1", frames_per_batch=64, total_frames=128, seed=0) as collector:
        ...     writer = RunFolderWriter(folder, next_obs=False, observation_keys=[("observation",)])
        ...     batches = [batch.clone() for batch in collector]
        ...     for batch in batches:
        ...         writer.append(batch)
        ...     writer.close()
        ...     run = load_run(folder)
        ...     rebuilt = run["next", "observation"][1]
        ...     print(run.batch_size, torch.equal(rebuilt, batches[1]["next", "observation"]))
        torch.Size([2, 1, 64]) True
    """
    folder = Path(folder)
    refuse_pickles(folder)
    record = read_commit(folder)
    if record is None:
        if not (folder / "meta.json").is_file():
            raise ValueError(f"{str(folder)!r} holds no run: no committed batches and no TensorDict "
                             "(a run stopped before writing anything leaves its folder so)")
        stored = load_memmap(folder)
        if not (folder / FINALS).is_dir():
            return stored
        return rebuild_next_observations(stored, load_memmap(folder / FINALS))
    stored = load_rows(folder, record["batches"])
    if record[FINALS] is None or not record["batches"]:
        return stored
    return rebuild_next_observations(stored, load_rows(folder / FINALS, record[FINALS]))
