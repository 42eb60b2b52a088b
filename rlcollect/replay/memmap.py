"""A storage in a folder of memory-mapped files, and saving any storage to such a folder.

:class:`MemmapStorage` keeps its frames and bookkeeping (see :mod:`rlcollect.replay.storage`) in
files, so they outlive the process and any process that opens the folder can write concurrently
(a file lock, which the kernel releases if its holder dies, serialises the bookkeeping).
:func:`dump_storage` writes any storage's contents as such a folder; :func:`load_storage` reads one
back into any storage of the same capacity.

Examples:
    >>> import tempfile, torch
    >>> from tensordict import TensorDict
    >>> folder = tempfile.mkdtemp()
    >>> storage = MemmapStorage(folder, capacity=4)
    >>> _ = storage.extend(TensorDict({"x": torch.arange(3.0)}, batch_size=[3]))
    >>> reopened = MemmapStorage(folder, capacity=4)
    >>> reopened.write_count, reopened.leaf("x")
    (3, tensor([0., 1., 2., 0.]))
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDictBase

from rlcollect.common.memmap_folder import load_memmap
from rlcollect.replay._locks import Lock
from rlcollect.replay.storage import EMPTY, Storage

__all__ = ["MemmapStorage", "dump_storage", "load_storage"]

_META = "meta.json"
_FORMAT = "rlcollect.replay"


class MemmapStorage(Storage):
    """Tensors in memory-mapped files under ``path``, which outlive the process.

    The folder holds ``meta.json`` (capacity; whether laid out), ``data/`` (a TensorDict memmap
    folder, readable with ``TensorDict.load_memmap``), ``count.memmap``, ``stamp.memmap``,
    ``reserved.memmap`` and ``lock``. Opening a folder that holds a storage reopens it, contents
    and cursor included. Any process that opens the folder (or receives the storage, which pickles as
    its path) may write concurrently.
    """

    def __init__(self, path: str | os.PathLike[str], capacity: int) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"path={str(path)!r} is a file; a memmap replay buffer needs a folder")
        self.path.mkdir(parents=True, exist_ok=True)
        super().__init__(capacity)
        with self._lock:
            meta = self._read_meta()
            if meta is None:
                self._write_meta(initialized=False)
            elif meta["capacity"] != capacity:
                raise ValueError(
                    f"path={str(path)!r} holds a replay buffer of capacity {meta['capacity']}, "
                    f"got capacity={capacity}"
                )
            elif meta["version"] == 1 and meta["initialized"]:  # one counter then, all frames committed
                old = np.fromfile(self.path / "count.memmap", dtype=np.int64)[0]
                stored = (np.fromfile(self.path / "stamp.memmap", dtype=np.int64) >= 0).sum()
                np.array([old, old, stored], dtype=np.int64).tofile(self.path / "count.memmap")
                self._write_meta(initialized=True)
        self._refresh()

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> MemmapStorage:
        """Open the storage folder ``path`` with the capacity it was created with."""
        meta = json.loads((Path(path) / _META).read_text()) if (Path(path) / _META).exists() else None
        if meta is None or meta.get("format") != _FORMAT:
            raise FileNotFoundError(f"{str(path)!r} holds no rlcollect replay storage (no {_META})")
        return cls(path, meta["capacity"])

    def _make_lock(self) -> Lock:
        return Lock(self.path / "lock")

    def _read_meta(self) -> dict[str, Any] | None:
        meta_path = self.path / _META
        return json.loads(meta_path.read_text()) if meta_path.exists() else None

    def _write_meta(self, initialized: bool) -> None:
        meta = {"format": _FORMAT, "version": 2, "capacity": self.capacity, "initialized": initialized}
        tmp = self.path / f"{_META}.tmp"
        tmp.write_text(json.dumps(meta) + "\n")
        os.replace(tmp, self.path / _META)  # readers see the old or the new file, never half of one

    def _bookkeeping(self, name: str, shape: tuple[int, ...], create: bool) -> torch.Tensor:
        filename = self.path / f"{name}.memmap"
        if create:
            return cast(torch.Tensor, MemoryMappedTensor.zeros(shape, dtype=torch.int64, filename=filename))
        return cast(torch.Tensor, MemoryMappedTensor.from_filename(filename, dtype=torch.int64,
                                                                  shape=torch.Size(shape)))

    def _open_files(self, create: bool) -> None:
        self._count = self._bookkeeping("count", (3,), create)
        self._stamp = self._bookkeeping("stamp", (self.capacity,), create)
        self._reserved = self._bookkeeping("reserved", (self.capacity,), create)

    def _refresh(self) -> None:
        if self._data is None and (meta := self._read_meta()) is not None and meta["initialized"]:
            self._adopt(load_memmap(self.path / "data"))
            self._open_files(create=False)

    def init(self, template: TensorDictBase) -> None:
        with self._lock:  # two processes laying out one folder: the second opens the first's
            if self.initialized:
                self.check_layout(template)
                return
            one = template.detach()[:1]
            if not one.batch_size[0]:  # no frame to copy the layout from: make one
                one = one.apply(lambda t: torch.zeros((1, *t.shape[1:]), dtype=t.dtype), batch_size=[1])
            shutil.rmtree(self.path / "data", ignore_errors=True)  # left by a process that died here
            _check_space(self.path, _bytes_per_frame(one) * self.capacity + 2 * 8 * self.capacity)
            data = one.expand(self.capacity).memmap_like(prefix=self.path / "data")
            _reserve(self.path / "data")  # blocks allocated now: a write through the map never faults
            self._adopt(data)
            self._open_files(create=True)
            self._stamp.fill_(EMPTY)
            self._reserved.fill_(EMPTY)
            self._write_meta(initialized=True)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "capacity": self.capacity}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["capacity"])  # type: ignore[misc]


def dump_storage(storage: Storage, folder: Path) -> None:
    """Write ``storage``'s contents to ``folder`` as a memmap storage folder (replacing one already there)."""
    folder = Path(folder)
    if (folder / _META).exists():
        shutil.rmtree(folder)
    MemmapStorage(folder, storage.capacity).load_state_dict(storage.state_dict())


def load_storage(storage: Storage, folder: Path) -> None:
    """Replace ``storage``'s contents with those of a folder written by :func:`dump_storage`."""
    storage.load_state_dict(MemmapStorage.open(folder).state_dict())


def _bytes_per_frame(one: TensorDictBase) -> int:
    return sum(t.numel() * t.element_size() for t in one.values(True, True))


def _check_space(path: Path, needed: int) -> None:
    """A disk too small for the storage is an ``OSError`` now, not a SIGBUS at the first write
    past its free space (a mapped file's pages are only allocated when written)."""
    free = shutil.disk_usage(path).free
    if needed > free:
        raise OSError(errno.ENOSPC, f"the memmap storage at {path} needs {needed:,} bytes; its disk has "
                                    f"{free:,} free", str(path))


def _reserve(folder: Path) -> None:
    """Allocate every file's blocks under ``folder`` (``posix_fallocate``); a full disk raises
    ``OSError`` naming the file and the bytes."""
    for path in sorted(folder.rglob("*.memmap")):
        size = path.stat().st_size
        descriptor = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(descriptor, 0, size)
        except OSError as error:
            if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a filesystem that cannot: the check above
                return
            raise OSError(error.errno, f"cannot reserve {size:,} bytes for {path} "
                                       f"({os.strerror(error.errno or errno.EIO)})", str(path)) from None
        finally:
            os.close(descriptor)
