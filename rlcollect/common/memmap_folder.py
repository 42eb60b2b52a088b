"""Open a TensorDict memmap folder written elsewhere as data only: :func:`load_memmap`.

A memmap folder from another machine, a download or a shared disk is not trusted: TensorDict
stores a leaf it cannot write as tensors (an arbitrary Python object) as a pickle file beside it,
and unpickling one can run any code. :func:`load_memmap` refuses a folder holding such a file,
naming it, before anything is read, and opens the rest with ``allow_pickle=False``.

Examples:
    >>> import tempfile, torch
    >>> from tensordict import NonTensorData, TensorDict
    >>> folder = tempfile.mkdtemp()
    >>> _ = TensorDict({"x": torch.arange(3)}, [3]).memmap(folder + "/ok")
    >>> load_memmap(folder + "/ok")["x"].tolist()
    [0, 1, 2]
    >>> _ = TensorDict({"x": NonTensorData(object())}, []).memmap(folder + "/bad")
    >>> load_memmap(folder + "/bad")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../bad/x/other.pickle is a pickled leaf: ...
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tensordict import TensorDict, TensorDictBase

__all__ = ["load_memmap", "read_json", "refuse_pickles"]

#: What TensorDict writes a leaf it pickles to (``other.pickle``), and what else names a pickle.
_PICKLE_SUFFIXES = (".pickle", ".pkl", ".pk")


def pickled_files(folder: str | Path) -> list[Path]:
    """The files under ``folder`` that hold pickles, in path order."""
    return sorted(path for path in Path(folder).rglob("*") if path.suffix in _PICKLE_SUFFIXES)


def refuse_pickles(folder: str | Path) -> None:
    """Raise ``ValueError`` naming the first pickle file under ``folder``, if it holds one."""
    found = pickled_files(folder)
    if found:
        raise ValueError(f"{found[0]} is a pickled leaf: rlcollect reads memmap folders as data only "
                         "(unpickling can run any code); a folder rlcollect wrote holds none, so this "
                         "one was written by other code or crafted")


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``ValueError`` naming the file where it holds something else."""
    try:
        record = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}): damaged or not written by rlcollect") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} holds a JSON {type(record).__name__}, not the object rlcollect writes")
    return record


def load_memmap(folder: str | Path) -> TensorDictBase:
    """``TensorDict.load_memmap(folder)``, refusing any pickled leaf (see the module's docstring).

    Raises:
        ValueError: the folder holds a pickle file (the first named), or TensorDict finds one
            anyway; nothing was unpickled.
    """
    refuse_pickles(folder)
    try:
        return TensorDict.load_memmap(folder, allow_pickle=False)
    except RuntimeError as error:
        if "pickle" not in str(error).lower():
            raise
        raise ValueError(f"{folder}: {error}") from None
