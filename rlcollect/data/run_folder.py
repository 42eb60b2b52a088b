"""A run folder: batches appended to a memory-mapped TensorDict ``[batches, envs, T]`` as they come.

The folder is TensorDict's own memmap format, so ``TensorDict.load_memmap(folder)`` opens it; it
grows by one batch per :meth:`RunFolderWriter.append` (each leaf's file gets the batch's bytes at
its end, then the ``meta.json`` files the new size), so nothing is allocated for batches that are
never collected, and the folder loads at its written size at any moment, also after a crash.

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
    ...     print(TensorDict.load_memmap(folder)["x"][:, 0, 0].tolist())
    [0, 1, 2]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["FINALS", "RunFolderWriter", "load_run", "rebuild_next_observations"]

#: The sub-folder of a run without next observations that holds the ones that cannot be rebuilt.
FINALS = "final_observations"
_WHERE = ("batch", "env", "step")  # the index of each final observation in the run


class _AppendingMemmap:
    """A memmap TensorDict folder grown along its first dim by appending each leaf's bytes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.length = 0
        self._files: dict[tuple[str, ...], BinaryIO] = {}
        self._metas: set[Path] = set()  # the meta.json of the folder and of each nested TensorDict

    def append(self, data: TensorDictBase) -> None:
        """Add ``data`` (``[n, ...]``, the same keys, shapes and dtypes every time) at the end."""
        if not self._files:
            data.memmap(self.folder)  # the format and the first rows: tensordict's own writer
            for key in data.keys(include_nested=True, leaves_only=True):
                key = (key,) if isinstance(key, str) else tuple(key)
                path = self.folder.joinpath(*key[:-1], f"{key[-1]}.memmap")
                if not path.is_file():
                    raise RuntimeError(f"tensordict wrote no {path} for {key}: its memmap format changed")
                self._files[key] = path.open("ab")
                self._metas.update(self.folder.joinpath(*key[:i], "meta.json") for i in range(len(key)))
        else:
            for key, file in self._files.items():
                value = data.get(key)
                file.write(np.ascontiguousarray(value.numpy(force=True)).data.cast("B"))
            for file in self._files.values():
                file.flush()
        self.length += data.shape[0]
        if self.length > data.shape[0]:
            self._write_meta()  # after the data: the folder never claims rows it lacks

    def _write_meta(self) -> None:
        for meta in self._metas:
            record = json.loads(meta.read_text())
            record["shape"][0] = self.length
            for entry in record.values():
                if isinstance(entry, dict) and "shape" in entry:
                    entry["shape"][0] = self.length
            temporary = meta.with_suffix(".tmp")
            temporary.write_text(json.dumps(record))
            os.replace(temporary, meta)

    def close(self) -> None:
        for file in self._files.values():
            file.close()
        self._files.clear()


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
        self._finals = _AppendingMemmap(self.folder / FINALS)

    def append(self, batch: TensorDictBase) -> None:
        """Store ``batch`` (``[envs, T]``) as the next index of the folder."""
        if not self.next_obs:
            self._append_finals(batch)
            batch = batch.exclude(*[("next", *key) for key in self.observation_keys])
        self._main.append(batch.unsqueeze(0))
        self.batches += 1

    def _append_finals(self, batch: TensorDictBase) -> None:
        keep = batch.get(("next", "done")).reshape(batch.shape).clone()
        keep[:, -1] = True  # a batch's last next observation is not in the folder either
        envs, steps = keep.nonzero(as_tuple=True)
        where = {"batch": torch.full_like(envs, self.batches), "env": envs, "step": steps}
        finals = TensorDict(where, batch_size=[len(envs)])
        for key in self.observation_keys:
            finals.set(key, batch.get(("next", *key))[envs, steps])
        self._finals.append(finals)

    def close(self) -> None:
        """Close the files (the folder stays as written)."""
        self._main.close()
        self._finals.close()


def rebuild_next_observations(stored: TensorDictBase, finals: TensorDictBase) -> TensorDictBase:
    """``stored`` (``[batches, envs, T]`` without next observations) with them rebuilt in memory:
    step ``t``'s is step ``t + 1``'s observation, or the one ``finals`` holds for ``(batch, env, t)``."""
    batch, env, step = (finals.get(name) for name in _WHERE)
    rebuilt = stored.copy()  # a new TensorDict over the same (memory-mapped) tensors
    if rebuilt.is_locked:
        rebuilt.unlock_()
    for key in finals.exclude(*_WHERE).keys(include_nested=True, leaves_only=True):
        key = (key,) if isinstance(key, str) else tuple(key)
        obs = stored.get(key)
        next_obs = torch.empty_like(obs, device="cpu")
        next_obs[:, :, :-1] = obs[:, :, 1:]
        next_obs[batch, env, step] = finals.get(key)
        rebuilt.set(("next", *key), next_obs)
    return rebuilt


def load_run(folder: str | Path) -> TensorDictBase:
    """The batches of a run folder, ``[batches, envs, T]``, with every key a collector writes.

    A folder with the next observations is memory-mapped as it is (``TensorDict.load_memmap``);
    one written without them gets them rebuilt in memory (:func:`rebuild_next_observations`).

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
    stored = TensorDict.load_memmap(folder)
    if not (folder / FINALS).is_dir():
        return stored
    return rebuild_next_observations(stored, TensorDict.load_memmap(folder / FINALS))
