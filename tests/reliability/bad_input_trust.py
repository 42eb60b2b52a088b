"""The bad-input table's cases of trust, resources and misuse (``test_bad_input.py`` runs them):
crafted states and folders, the CLI's ``--force`` / ``--out`` / ``--seconds``, the weight channel's
secret, resets after the first, worker failures that are not ``Exception``, copies of collectors.

Each entry is ``(section, case id, build, error, pattern)``, as the table's own cases.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, load_run
from rlcollect.cli.main import main as cli_main
from rlcollect.data.run_folder import RunFolderWriter
from rlcollect.data.run_reader import RunReader
from rlcollect.replay import ReplayBuffer
from tests.envs_for_tests import Payload

V, T = ValueError, TypeError
Entry = tuple[str, str, Callable[[], Any], Any, str]
ENTRIES: list[Entry] = []


def add(section: str, case_id: str, build: Callable[[], Any], error: Any, pattern: str) -> None:
    ENTRIES.append((section, case_id, build, error, pattern))


#: Unpickled, it creates ``/tmp/rlcollect-bad-input-ran``: a reader ran code from the data.
PICKLED = pickle.dumps(Payload(os.path.join(tempfile.gettempdir(), "rlcollect-bad-input-ran")))


def cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


# -- states -----------------------------------------------------------------------------------------
def _innermost(env_state: Any) -> Any:
    """The CartPoleEnv's object state inside the first env's captured wrappers."""
    state = env_state["items"][0]
    while "env" in state["attrs"]:
        state = state["attrs"]["env"]
    return state


def deep(change: Callable[[Any], None]) -> Callable[[], Any]:
    """A Collector's own state with ``change`` made to its envs' part, loaded into a second one."""
    def build() -> Any:
        with Collector(cartpole, None, num_envs=2, frames_per_batch=8, seed=0) as collector:
            collector.next()
            state = collector.state_dict()
        change(state["rollout"]["envs"]["envs"])
        with Collector(cartpole, None, num_envs=2, frames_per_batch=8, seed=0) as resumed:
            resumed.load_state_dict(state)
    return build


def at(name: str, value: Any) -> Callable[[Any], None]:
    return lambda envs: _innermost(envs)["attrs"].__setitem__(name, value)


def edit(name: str, key: str, value: Any) -> Callable[[Any], None]:
    return lambda envs: _innermost(envs)["attrs"][name].__setitem__(key, value)


DEEP: dict[str, tuple[Callable[[Any], None], str]] = {
    "class swapped": (lambda e: _innermost(e).__setitem__("class", "os.PathLike"), r"PathLike in the state"),
    "unknown kind": (at("state", {"kind": "pickle", "data": PICKLED}), r"kind 'pickle' is not one"),
    "object dtype": (edit("state", "dtype", "|O"), r"dtype object is not data"),
    "void dtype": (edit("state", "dtype", "|V8"), r"is not data"),
    "dtype that names code": (edit("state", "dtype", "os.system"), r"not a 'array' value"),
    "array bytes too short": (edit("state", "data", b"\0"), r"not a 'array' value"),
    "array shape a string": (edit("state", "shape", "abc"), r"not a 'array' value"),
    "array without data": (lambda e: _innermost(e)["attrs"]["state"].pop("data"), r"not a 'array' value"),
    "bit generator 'os'": (edit("_np_random", "bit_generator", "os"), r"bit generator 'os'"),
    "generator state garbage": (edit("_np_random", "state", {"kind": "dict", "keys": [], "values": []}),
                                r"not a PCG64 state"),
    "a bare object": (at("state", object()), r"object is not an env state's value"),
    "a mapping without kind": (at("state", {"data": 1}), r"dict is not an env state's value"),
    "a reference ahead": (at("state", {"kind": "same", "path": "env.later"}), r"refers to 'env.later'"),
    "object without attrs": (lambda e: _innermost(e).pop("attrs"), r"not a 'object' value"),
    "list items not a list": (lambda e: e.__setitem__("items", 5), r"not a 'list' value"),
    "dict keys and values apart": (at("metadata", {"kind": "dict", "keys": ["a", "b"], "values": [1]}),
                                   r"not a 'dict' value"),
    "deque maxlen a string": (at("history", {"kind": "deque", "items": [], "maxlen": "x"}), r"not a 'deque'"),
    "random state garbage": (at("rng", {"kind": "random", "state": [1]}), r"not a 'random' value"),
    "torch generator state an int": (at("gen", {"kind": "torch_generator", "state": 3}), r"torch_generator"),
    "scalar bytes too short": (at("x", {"kind": "scalar", "dtype": "<f8", "shape": [], "data": b"\0\0"}),
                               r"not a 'scalar' value"),
    "three envs for two": (lambda e: e["items"].append(e["items"][0]), r"NoneType here and a"),
}
for name, (change, words) in DEEP.items():
    add("states", f"Collector state: {name}", deep(change), V, words)

NOT_DATA: dict[str, Any] = {"pickle bytes": PICKLED, "a string": "gASV", "an int": 7, "a float": 1.5,
                            "a list": [1, 2], "a tuple": (1,), "True": True, "empty bytes": b"",
                            "a bytearray": bytearray(PICKLED)}


def pooled_state(cls: type, envs: Any) -> dict[str, Any]:
    """A crafted state of a one-worker ``cls`` whose worker's envs part is ``envs``."""
    worker = {"rollout": {"envs": {"steps": torch.zeros(1, dtype=torch.int64), "envs": envs}},
              "policy_version": 0}
    state: dict[str, Any] = {"kind": cls.__name__, "format": 1, "frames": 0, "batches": 0, "weights": None,
                             "next_traj_id": [0], "pending": [], "workers": [worker], "server": None}
    return state


def crafted(kind: str, envs: Any) -> Callable[[], Any]:
    def build() -> Any:
        if kind == "Collector":
            with Collector(cartpole, None, frames_per_batch=8) as collector:
                state = collector.state_dict()
                state["rollout"]["envs"]["envs"] = envs
                collector.load_state_dict(state)
            return
        cls = {"MultiSync": MultiSyncCollector, "MultiAsync": MultiAsyncCollector,
               "AsyncBatched": AsyncBatchedCollector}[kind]
        arguments: dict[str, Any] = {"frames_per_batch": 8}
        if cls is AsyncBatchedCollector:
            arguments.update(policy=lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64), num_envs=1)
        else:
            arguments.update(num_workers=1)
        with cls(cartpole, **arguments) as collector:
            collector.load_state_dict(pooled_state(cls, envs))
    return build


for kind in ("Collector", "MultiSync", "MultiAsync", "AsyncBatched"):
    for name, envs in NOT_DATA.items():
        add("states", f"{kind} state with envs as {name}", crafted(kind, envs), V,
            r"the state's envs are \w+, not the data state_dict\(\) writes .* never unpickles")


# -- folders ------------------------------------------------------------------------------------------
def run_folder(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    writer = RunFolderWriter(folder)
    writer.append(TensorDict({"x": torch.zeros(2, 3)}, [2, 3]))
    writer.close()


def plain_folder(folder: Path) -> None:
    TensorDict({"x": torch.zeros(2)}, [2]).memmap(folder)


def replay_folder(folder: Path) -> None:
    ReplayBuffer(4, storage="memmap", path=folder).extend(TensorDict({"x": torch.zeros(2)}, [2]))


def inspect(folder: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli_main(["inspect", str(folder)])
    if status:
        raise ValueError(err.getvalue())


READERS: dict[str, tuple[Callable[[Path], None], Callable[[Path], Any], str]] = {
    "load_run": (run_folder, load_run, ""),
    "RunReader": (run_folder, RunReader, ""),
    "load_run of a plain memmap folder": (plain_folder, load_run, ""),
    "ReplayBuffer reopened": (replay_folder, lambda f: ReplayBuffer(4, storage="memmap", path=f).data,
                              "data"),
    "rlcollect inspect": (run_folder, inspect, ""),
}


def planted(make: Callable[[Path], None], read: Callable[[Path], Any], inner: str, name: str,
            content: bytes) -> Callable[[], Any]:
    def build() -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "folder"
            make(folder)
            leaf = folder / inner / "evil"
            leaf.mkdir(parents=True)
            (leaf / name).write_bytes(content)
            read(folder)
    return build


for reader, (make, read, inner) in READERS.items():
    for suffix in ("other.pickle", "leaf.pkl", "leaf.pk"):
        add("folders", f"{reader}: a pickled leaf {suffix}", planted(make, read, inner, suffix, PICKLED), V,
            rf"evil/{suffix.replace('.', '[.]')} is a pickled leaf")


def damaged(file: str, text: bytes, read: Callable[[Path], Any]) -> Callable[[], Any]:
    def build() -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "run"
            run_folder(folder)
            (folder / file).write_bytes(text)
            read(folder)
    return build


GARBAGE = {"not JSON": b"{not json", "a JSON list": b"[1, 2]", "a JSON string": b'"run"', "empty": b"",
           "binary": b"\x80\x04\x95"}
for file in ("committed.json", "meta.json"):
    for reader_name, reader in (("load_run", load_run), ("RunReader", RunReader)):
        for what, text in GARBAGE.items():
            add("folders", f"{reader_name}: {file} {what}", damaged(file, text, reader), V,
                rf"{file.replace('.', '[.]')} (is not valid JSON|holds a JSON)")


def bad_dtype(dtype: str, read: Callable[[Path], Any]) -> Callable[[], Any]:
    def build() -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "run"
            run_folder(folder)
            meta = (folder / "meta.json").read_text().replace('"torch.float32"', f'"{dtype}"')
            (folder / "meta.json").write_text(meta)
            read(folder)
    return build


for dtype in ("torch.load", "save", "float99", "torch.nn"):
    for reader_name, reader in (("load_run", load_run), ("RunReader", RunReader)):
        add("folders", f"{reader_name}: meta.json dtype {dtype}", bad_dtype(dtype, reader), V,
            rf"dtype '{dtype}' in meta.json is not a torch dtype")


# -- the command line -----------------------------------------------------------------------------------
class CliFailed(Exception):
    """The CLI exited with a non-zero status; the message is ``exit <status>: <stderr>``."""


def cli(argv: list[str], prepare: Callable[[Path], None] | None = None) -> Callable[[], Any]:
    def build() -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            if prepare is not None:
                prepare(out)
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                status = cli_main([a.replace("{out}", str(out)) for a in argv])
            if status:
                raise CliFailed(f"exit {status}: {err.getvalue().strip()}")
    return build


def run_with(extra: str) -> Callable[[Path], None]:
    """A previous run in ``out`` holding the user's file ``extra`` too."""
    def prepare(out: Path) -> None:
        run_folder(out)
        (out / "run.json").write_text("{}")
        target = out / extra
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("mine")
    return prepare


COLLECT = ["collect", "--env", "CartPole-v1", "--frames", "16", "--no-progress"]
add("CLI trust", "collect --out ''", cli([*COLLECT, "--out", ""]), CliFailed, r"--out '' names no folder")
add("CLI trust", "collect --out '   '", cli([*COLLECT, "--out", "   "]), CliFailed,
    r"--out '' names no folder")
for extra in ("my_notes.txt", "checkpoints/model.pt", "x/memmap/leaf.bin", ".hidden"):
    add("CLI trust", f"collect --force over a run holding {extra}",
        cli([*COLLECT, "--out", "{out}", "--force"], run_with(extra)), CliFailed,
        rf"holds a run and files it did not write \({extra.replace('.', '[.]')}\)")
add("CLI trust", "tune --env-kwargs g=abc", cli(["tune", "--env-kwargs", "g=abc", "--seconds", "2"]),
    CliFailed, r"exit 2: .*--env 'CartPole-v1' cannot be made with --env-kwargs g='abc'")
for seconds in ("inf", "nan", "-inf", "1e9", "86401", "1e400"):
    add("CLI trust", f"tune --seconds {seconds}", cli(["tune", f"--seconds={seconds}"]), CliFailed,
        rf"at most 86400 \(a day\), got '{seconds}'")


# -- the weight channel -----------------------------------------------------------------------------------
def scheme(**kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        from rlcollect.weights import DistributedWeightSyncScheme

        return DistributedWeightSyncScheme(**kwargs)
    return build


for value, error, words in ((b"", V, r"authkey=b'': an empty secret"), (bytearray(), V, r"an empty secret"),
                            ("text", T, r"authkey must be bytes .* got str"), (5, T, r"got int"),
                            (["a"], T, r"got list"), (0, T, r"got int")):
    add("weight channel", f"authkey={value!r}", scheme(authkey=value), error, words)


# -- resets after the first ---------------------------------------------------------------------------------
class ResetsBadly(gym.Env[Any, Any]):
    """CartPole-like: episodes of 2 steps; reset ``number`` (from 1) returns ``value``."""

    observation_space = spaces.Box(-1, 1, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, number: int, value: Any) -> None:
        self.number, self.value, self.resets, self.t = number, value, 0, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.resets += 1
        self.t = 0
        obs = np.zeros(4, np.float32)
        if self.resets == self.number:
            return self.value(obs) if callable(self.value) else self.value
        return obs, {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return np.zeros(4, np.float32), 1.0, self.t >= 2, False, {}


RESETS = {"(obs, None)": (lambda obs: (obs, None), r"\(ndarray, NoneType\)"),
          "(info, obs)": (lambda obs: ({}, obs), r"\(dict, ndarray\)"),
          "(obs,)": (lambda obs: (obs,), r"a tuple of 1 values \(ndarray\)"),
          "(obs, {}, 1)": (lambda obs: (obs, {}, 1), r"a tuple of 3 values"),
          "None": (None, r"returned NoneType from")}
for number, when in ((1, "the first reset"), (3, "a later reset")):
    for what, (value, words) in RESETS.items():
        def build(number: int = number, value: Any = value) -> Any:
            with Collector(lambda: ResetsBadly(number, value), None, frames_per_batch=8, total_frames=8) as c:
                list(c)
        where = r"from reset\(\) \(env 0, after step 3\)" if number == 3 else r"from reset\(\), not"
        add("resets", f"{when} returns {what}", build, V, rf"(?s)(?=.*{words})(?=.*{where})")


# -- worker failures that are not Exception ------------------------------------------------------------------
class Quits(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose second step raises ``error()``."""

    def __init__(self, error: Callable[[], BaseException]) -> None:
        super().__init__(cartpole())
        self.error, self.steps = error, 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == 2:
            raise self.error()
        return self.env.step(action)


class Custom(BaseException):
    """A BaseException of a user's own."""


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


FAILURES: dict[str, tuple[Callable[[], BaseException], str]] = {
    "SystemExit(4)": (lambda: SystemExit(4),
                      r"its env or policy raised SystemExit\(4\), which ends a worker"),
    "KeyboardInterrupt": (KeyboardInterrupt, r"raised KeyboardInterrupt\(\), which ends a worker"),
    "a BaseException of its own": (lambda: Custom("stop"), r"raised Custom\(stop\)"),
    "GeneratorExit": (GeneratorExit, r"raised GeneratorExit"),
    "an exception whose str() raises": (BadStr, r"BadStr: <its str\(\) raised RuntimeError>"),
}
for cls in (MultiSyncCollector, MultiAsyncCollector):
    for what, (error, words) in FAILURES.items():
        def fails(cls: type = cls, error: Callable[[], BaseException] = error) -> Any:
            with cls([lambda: Quits(error)], None, frames_per_batch=8, max_worker_restarts=0) as collector:
                collector.next()
        add("worker failures", f"{cls.__name__}: an env raising {what}", fails, RuntimeError,
            rf"worker 0.*{words}")


# -- copies and resources ----------------------------------------------------------------------------
def copied(kind: str, attempt: Callable[[Any], Any]) -> Callable[[], Any]:
    def build() -> Any:
        if kind == "Collector":
            made: Any = Collector(cartpole, None, frames_per_batch=8)
        elif kind == "AsyncBatchedCollector":
            made = AsyncBatchedCollector(cartpole, lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64),
                                         num_envs=1, frames_per_batch=8)
        else:
            cls = MultiSyncCollector if kind == "MultiSyncCollector" else MultiAsyncCollector
            made = cls(cartpole, None, num_workers=1, frames_per_batch=8)
        with made:
            attempt(made)
    return build


for kind in ("Collector", "MultiSyncCollector", "MultiAsyncCollector", "AsyncBatchedCollector"):
    for how, attempt in (("pickled", pickle.dumps), ("copied", copy.copy), ("deep-copied", copy.deepcopy)):
        add("copies and resources", f"{kind} {how}", copied(kind, attempt), T,
            rf"a {kind} cannot be pickled or copied")
for storage in ("memory", "shared"):
    add("copies and resources", f"ReplayBuffer of 2**40 frames in {storage}",
        lambda storage=storage: ReplayBuffer(2**40, storage=storage).extend(
            TensorDict({"x": torch.zeros(2)}, [2])),
        (V, MemoryError), r"capacity=1099511627776 needs 28\.0 TiB")


# -- sparse and meta tensors ------------------------------------------------------------------------
class Weighted(torch.nn.Module):
    """CartPole's actions from one [2, 4] weight."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2, 4))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs @ self.w.T).argmax(-1)


def sent(weights: Any) -> Callable[[], Any]:
    def build() -> Any:
        with Collector(cartpole, Weighted(), frames_per_batch=8) as collector:
            collector.update_policy_weights_(weights)
    return build


def acting(policy: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], Any]:
    return lambda: Collector(cartpole, policy, frames_per_batch=8).shutdown()


SPARSE: list[tuple[str, Callable[[], Any], Any, str]] = [
    ("sparse COO weights", sent({"w": torch.zeros(2, 4).to_sparse()}), T, r"'w' is a torch.sparse_coo"),
    ("sparse CSR weights", sent({"w": torch.zeros(2, 4).to_sparse_csr()}), T, r"'w' is a torch.sparse_csr"),
    ("meta weights", sent({"w": torch.zeros(2, 4, device="meta")}), V, r"'w' is on the meta device"),
    ("a sparse COO action", acting(lambda o: torch.zeros(o.shape[0], dtype=torch.int64).to_sparse()), V,
     r"the policy's action is a torch.sparse_coo tensor"),
    ("a sparse float action", acting(lambda o: torch.zeros(o.shape[0]).to_sparse()), V,
     r"action is a torch.sparse_coo tensor"),
]
for name, build, error, words in SPARSE:
    add("sparse and meta tensors", name, build, error, words)


# -- a state of another model ---------------------------------------------------------------------------
class Other(torch.nn.Module):
    """Another policy class for CartPole: a [3, 4] layer, its first two outputs compared."""

    def __init__(self) -> None:
        super().__init__()
        self.v = torch.nn.Linear(4, 3)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs)[..., :2].argmax(-1)


def another_model(cls: type, **arguments: Any) -> Callable[[], Any]:
    """The state of ``cls`` running :class:`Weighted`, loaded into one running :class:`Other`."""
    def build() -> Any:
        with cls(cartpole, Weighted(), frames_per_batch=8, **arguments) as collector:
            collector.next()
            state = collector.state_dict()
        with cls(cartpole, Other(), frames_per_batch=8, **arguments) as other:
            other.load_state_dict(state)
    return build


for cls, arguments in ((Collector, {}), (MultiSyncCollector, {"num_workers": 1}),
                       (MultiAsyncCollector, {"num_workers": 1}), (AsyncBatchedCollector, {"num_envs": 1})):
    add("states", f"{cls.__name__} state of another model", another_model(cls, **arguments), V,
        r"was taken of another model")
