"""A run folder read a few rows at a time: :class:`RunReader`.

:func:`~rlcollect.data.run_folder.load_run` maps the whole folder (and rebuilds left-out next
observations in memory); a reader instead reads, on demand, the steps ``start:stop`` of one env
in one batch straight from each leaf's file (one ``pread``, no mapping), so a pass over a run of
any size holds only the rows it asked for. Only the committed batches are read.

Example:
    >>> import tempfile, torch
    >>> from tensordict import TensorDict
    >>> from rlcollect.data.run_folder import RunFolderWriter
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     writer = RunFolderWriter(folder)
    ...     for i in range(3):  # 3 batches of 2 envs x 4 steps
    ...         writer.append(TensorDict({"x": torch.arange(8).reshape(2, 4) + 10 * i}, [2, 4]))
    ...     writer.close()
    ...     reader = RunReader(folder)
    ...     print(reader.batch_size, reader.read(("x",), batch=2, env=1, start=1, stop=3).tolist())
    (3, 2, 4) [25, 26]
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from rlcollect.common.memmap_folder import read_json, refuse_pickles
from rlcollect.data.run_folder import FINALS, WHERE, leaf_dtype, load_rows, read_commit

__all__ = ["RunReader"]

Key = tuple[str, ...]


class RunReader:
    """The committed batches ``[batches, envs, T]`` of the run folder ``folder``, read on demand.

    Raises:
        ValueError: ``folder`` holds no ``meta.json`` (not a TensorDict memmap folder), or a
            pickle file (named; never unpickled).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        refuse_pickles(self.folder)
        meta = _meta(self.folder)
        record = read_commit(self.folder)
        batches = record["batches"] if record is not None else meta["shape"][0]
        self.batch_size: tuple[int, int, int] = (batches, *meta["shape"][1:3])
        self._finals_rows = record.get(FINALS) if record is not None else None
        self._finals: TensorDictBase | None = None  # loaded (small) when first needed
        self._final_rows: dict[tuple[int, int, int], int] = {}
        self._leaves: dict[Key, tuple[Path, torch.dtype, tuple[int, ...]]] = {}
        self._find_leaves(self.folder, ())

    def _find_leaves(self, folder: Path, prefix: Key) -> None:
        for name, entry in _meta(folder).items():
            if not isinstance(entry, dict):
                continue
            if entry.get("type") == "TensorDict":
                self._find_leaves(folder / name, (*prefix, name))
            elif "dtype" in entry:
                dtype = leaf_dtype(entry, folder / f"{name}.memmap")
                key = (*prefix, name)  # (mypy reads d[(*a, b)] as Python 3.11's d[*a, b])
                self._leaves[key] = (folder / f"{name}.memmap", dtype, tuple(entry["shape"][3:]))

    def leaves(self) -> set[Key]:
        """Every leaf's key."""
        return set(self._leaves)

    def read(self, key: Key, batch: int, env: int, start: int, stop: int) -> torch.Tensor:
        """Steps ``start:stop`` of env ``env`` in batch ``batch`` of leaf ``key``: ``[stop - start, ...]``."""
        path, dtype, feature = self._leaves[key]
        _, envs, steps = self.batch_size
        row = math.prod(feature) * torch.empty((), dtype=dtype).element_size()
        offset = ((batch * envs + env) * steps + start) * row
        with path.open("rb") as file:
            data = os.pread(file.fileno(), (stop - start) * row, offset)
        if len(data) != (stop - start) * row:
            raise ValueError(f"{path} ends before batch {batch}, env {env}, steps {start}:{stop}")
        return torch.frombuffer(bytearray(data), dtype=dtype).reshape(stop - start, *feature)

    def column(self, key: Key) -> torch.Tensor:
        """The whole leaf ``key`` ``[batches, envs, T, ...]`` (for the small ones: flags, ids)."""
        batches, envs, steps = self.batch_size
        _, dtype, feature = self._leaves[key]
        if not batches:
            return torch.empty(0, envs, steps, *feature, dtype=dtype)
        return self.read(key, 0, 0, 0, batches * envs * steps).reshape(batches, envs, steps, *feature)

    def next_observation(self, key: Key, batch: int, env: int, step: int) -> torch.Tensor:
        """The next observation ``key`` of one step: stored, or (a run that left them out) the
        following step's observation, or the one kept in ``final_observations/``."""
        if ("next", *key) in self._leaves:
            return self.read(("next", *key), batch, env, step, step + 1)[0]
        if self._finals is None:
            self._finals = load_rows(self.folder / FINALS, self._finals_rows or 0)
            where = zip(*(self._finals.get(name).tolist() for name in WHERE), strict=True)
            self._final_rows = {index: row for row, index in enumerate(where)}
        row = self._final_rows.get((batch, env, step))
        if row is not None:
            return cast(torch.Tensor, self._finals.get(key)[row].clone())
        return self.read(key, batch, env, step + 1, step + 2)[0]


def _meta(folder: Path) -> dict[str, Any]:
    path = folder / "meta.json"
    if not path.is_file():
        raise ValueError(f"{folder} is not a saved TensorDict folder (no meta.json)")
    meta: dict[str, Any] = read_json(path)
    return meta
