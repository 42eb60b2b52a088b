"""Folders from elsewhere are data: every reader of rlcollect's refuses a folder holding a pickled
leaf, naming the file, with no code run (a marker the payload would create never appears); garbage
JSON is an error naming the file."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rlcollect import ReplayBuffer, load_run
from rlcollect.cli.main import main
from rlcollect.data.run_folder import RunFolderWriter
from rlcollect.data.run_reader import RunReader
from tests.envs_for_tests import Payload

pytestmark = pytest.mark.timeout(60)


def plant(folder: Path, marker: Path) -> Path:
    """A pickled leaf in ``folder``, laid out as TensorDict writes one; returns its file."""
    leaf = folder / "evil"
    leaf.mkdir()
    (leaf / "meta.json").write_text('{"_type": "<class \'tensordict.tensorclass.NonTensorData\'>"}')
    target = leaf / "other.pickle"
    target.write_bytes(pickle.dumps(Payload(marker)))
    return target


def run_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    writer = RunFolderWriter(folder)
    for i in range(2):
        writer.append(TensorDict({"x": torch.full((2, 3), float(i))}, [2, 3]))
    writer.close()
    return folder


def plain_folder(folder: Path) -> Path:
    TensorDict({"x": torch.zeros(2)}, [2]).memmap(folder)
    return folder


def replay_folder(folder: Path) -> Path:
    buffer = ReplayBuffer(8, storage="memmap", path=folder)
    buffer.extend(TensorDict({"x": torch.arange(4.0)}, [4]))
    return folder / "data"


def _cli(command: str) -> Callable[[Path], Any]:
    def read(folder: Path) -> Any:
        if main([command, str(folder), *(["--format", "minari", "--dataset-id", "x/y-v0"]
                                          if command == "export" else [])]) != 0:
            raise ValueError("exit status 2")
        return None
    return read


READERS: dict[str, tuple[Callable[[Path], Path], Callable[[Path], Any]]] = {
    "load_run": (run_folder, load_run),
    "RunReader": (run_folder, RunReader),
    "load_run, plain memmap folder": (plain_folder, load_run),
    "ReplayBuffer reopened": (replay_folder, lambda f: ReplayBuffer(8, storage="memmap", path=f).data),
    "rlcollect inspect": (run_folder, _cli("inspect")),
}


@pytest.mark.parametrize("case", sorted(READERS))
def test_a_pickled_leaf_is_refused_naming_the_file(case: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    make, read = READERS[case]
    marker = tmp_path / "ran"
    folder = make(tmp_path / "folder")
    planted = plant(folder, marker)
    with pytest.raises(ValueError) as raised:
        read(folder.parent if case == "ReplayBuffer reopened" else folder)
    assert str(planted) in str(raised.value) + capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("name", ["committed.json", "meta.json"])
def test_garbage_json_is_an_error_naming_the_file(name: str, tmp_path: Path) -> None:
    folder = run_folder(tmp_path / "run")
    (folder / name).write_text("{not json")
    with pytest.raises(ValueError, match=f"{folder / name} is not valid JSON"):
        load_run(folder)
