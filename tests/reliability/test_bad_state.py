"""Bad states, weight dtypes, priority indices and CLI devices: each refused with a clear error.

The second bad-input table (the first is ``test_bad_input.py``, whose helpers it uses): every
``load_state_dict`` (the four collectors, the replay buffer, its samplers, the weight store) given
something that is not its own state - nothing, a list, an empty dict, another kind's state, another
format, a state missing one of its keys, one of other envs or workers or shapes - raises naming what
is wrong, before anything is changed; a weight update of another kind of dtype, priorities indexed
by non-integers and ``--device`` values the CLI cannot store from are refused the same way.

States are made once per kind (:func:`state_of`, from collectors that ran one batch); the collector
that loads one is built fresh for each case and never starts a worker (the checks come first).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.replay import ReplayBuffer
from rlcollect.replay.samplers import PrioritizedSampler, SliceSampler, UniformSampler
from tests.reliability.test_bad_input import (
    CliFailed,
    Linear4,
    assert_refused,
    batched,
    cli,
    collector,
    multi,
    names,
    update,
    zeros_policy,
)

pytestmark = pytest.mark.timeout(60)

T, V = TypeError, ValueError
KINDS = {
    "single": "Collector",
    "sync": "MultiSyncCollector",
    "async": "MultiAsyncCollector",
    "batched": "AsyncBatchedCollector",
}
REQUIRED = {
    "single": ["policy_version", "rollout"],
    "sync": ["frames", "batches", "weights", "next_traj_id", "pending", "workers"],
}
REQUIRED["async"] = REQUIRED["sync"]
REQUIRED["batched"] = [*REQUIRED["sync"], "server"]


# -- states, made once ----------------------------------------------------------------------------
def source(kind: str, workers: int = 1, env: str = "CartPole-v1", num_envs: int = 1) -> Any:
    frames = {"frames_per_batch": 8 * num_envs, "total_frames": -1, "seed": 0}
    if kind == "single":
        return Collector(env, Linear4() if env == "CartPole-v1" else None, num_envs=num_envs, **frames)
    if kind == "batched":
        return AsyncBatchedCollector(env, zeros_policy, num_envs=workers, **frames)
    cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
    return cls(env, Linear4(), num_workers=workers, **frames)


@functools.cache
def state_of(kind: str, workers: int = 1, env: str = "CartPole-v1", num_envs: int = 1) -> dict[str, Any]:
    """The state of a ``kind`` collector after one batch."""
    made = source(kind, workers, env, num_envs)
    try:
        next(iter(made))
        return made.state_dict()
    finally:
        made.shutdown()


def target(kind: str) -> Callable[[], Any]:
    """The collector a case loads into: as its :func:`source`, never started."""
    if kind == "single":
        return collector(policy=Linear4(), seed=0)
    if kind == "batched":
        return batched()
    return multi(MultiSyncCollector if kind == "sync" else MultiAsyncCollector, policy=Linear4())


def load(kind: str, state: Callable[[], Any]) -> Callable[[], Any]:
    def build() -> Any:
        made = target(kind)()
        try:
            made.load_state_dict(state())
        finally:
            made.shutdown()

    return build


def without(kind: str, key: str) -> Callable[[], Any]:
    return lambda: {k: v for k, v in state_of(kind).items() if k != key}


def edited(which: str, **changes: Any) -> Callable[[], Any]:
    return lambda: {**state_of(which), **changes}


def weights_edited(change: Callable[[dict[str, Any]], None]) -> Callable[[], Any]:
    """A MultiSync state whose weight-store state ``change`` edits (on a copy)."""

    def state() -> dict[str, Any]:
        full = dict(state_of("sync"))
        weights = dict(full["weights"])
        weights["copies"] = copy.deepcopy(weights["copies"])
        change(weights)
        return {**full, "weights": weights}

    return state


def case(case_id: str, build: Callable[[], Any], error: Any, pattern: str) -> Any:
    return pytest.param(build, error, pattern, id=case_id)


def pipe_loads(state: Callable[[], Any]) -> Callable[[], Any]:
    """``load_state_dict`` of the pipe scheme's sender (MultiProcessWeightSyncScheme), 2 workers."""
    def build() -> Any:
        from rlcollect.weights.pipe import PipeWeights

        PipeWeights({"policy": Linear4()}, num_workers=2).load_state_dict(state())
    return build


def pipe_state() -> dict[str, Any]:
    from rlcollect.weights.pipe import PipeWeights

    return PipeWeights({"policy": Linear4()}, num_workers=2).state_dict()


# -- the table ------------------------------------------------------------------------------------
CASES: list[Any] = []
for kind, name in KINDS.items():
    where = re.escape(f"{name}.load_state_dict")
    CASES += [
        case(f"{kind}: None", load(kind, lambda: None), T, names(where, "needs the mapping", "NoneType")),
        case(f"{kind}: a list", load(kind, lambda: [1, 2]), T, names(where, "got list")),
        case(f"{kind}: an empty dict", load(kind, dict), V, names(where, "lacks", REQUIRED[kind][0])),
        case(f"{kind}: format 99", load(kind, edited(kind, format=99)), V, names(where, "format", "99")),
        case(
            f"{kind}: the kind a str of nothing",
            load(kind, edited(kind, kind="")),
            V,
            names(where, "given the state of a "),
        ),
        case(
            f"{kind}: a replay buffer's state",
            load(kind, lambda: ReplayBuffer(4).state_dict()),
            V,
            names(where, "state of a ReplayBuffer"),
        ),
        case(
            f"{kind}: a weight-store state",
            load(kind, lambda: state_of("sync")["weights"]),
            V,
            names(where, "state of a WeightStore"),
        ),
    ]
    CASES += [
        case(
            f"{kind}: {other}'s state",
            load(kind, functools.partial(state_of, other)),
            V,
            names(where, f"given the state of a {KINDS[other]}", f"only a {name}"),
        )
        for other in KINDS
        if other != kind
    ]
    CASES += [
        case(f"{kind}: no {key!r}", load(kind, without(kind, key)), V, names(where, "lacks", f"'{key}'"))
        for key in REQUIRED[kind]
    ]
CASES += [
    case(
        "sync: 2 workers' state into 1",
        load("sync", lambda: state_of("sync", 2)),
        V,
        names("holds 2 workers", "num_workers=1"),
    ),
    case(
        "async: 2 workers' state into 1",
        load("async", lambda: state_of("async", 2)),
        V,
        names("holds 2 workers", "num_workers=1"),
    ),
    case(
        "batched: 2 workers' state into 1",
        load("batched", lambda: state_of("batched", 2)),
        V,
        names("holds 2 workers", "num_workers=1"),
    ),
    case(
        "sync: next_traj_id of 3 workers",
        load("sync", edited("sync", next_traj_id=[0, 1, 2])),
        V,
        names("num_workers=1"),
    ),
    case(
        "single: 2 envs' state into 1",
        load("single", lambda: state_of("single", num_envs=2)),
        V,
        names("observation", "shape \\[2, 4\\]", "\\[1, 4\\]"),
    ),
    case(
        "single: Pendulum's state into CartPole",
        load("single", lambda: state_of("single", env="Pendulum-v1")),
        V,
        names("observation", "shape \\[1, 3\\]", "\\[1, 4\\]"),
    ),
    case(
        "single: the rollout state None",
        load("single", edited("single", rollout=None)),
        T,
        names("Rollout.load_state_dict", "NoneType"),
    ),
    case(
        "single: the rollout state of a pooled collector",
        load("single", edited("single", rollout={"kind": "MultiSyncCollector"})),
        V,
        names("Rollout.load_state_dict", "MultiSyncCollector"),
    ),
    case(
        "single: the rollout without pending_obs",
        load(
            "single",
            lambda: {
                **state_of("single"),
                "rollout": {k: v for k, v in state_of("single")["rollout"].items() if k != "pending_obs"},
            },
        ),
        V,
        names("Rollout", "lacks", "pending_obs"),
    ),
    case(
        "single: pending_obs of another key",
        load(
            "single",
            lambda: {
                **state_of("single"),
                "rollout": {**state_of("single")["rollout"], "pending_obs": {"pixels": torch.zeros(1, 4)}},
            },
        ),
        V,
        names("observations are", "pixels"),
    ),
    case(
        "single: pending_obs in float64",
        load(
            "single",
            lambda: {
                **state_of("single"),
                "rollout": {
                    **state_of("single")["rollout"],
                    "pending_obs": {
                        k: v.double() for k, v in state_of("single")["rollout"]["pending_obs"].items()
                    },
                },
            },
        ),
        T,
        names("observation", "float64", "float32"),
    ),
    # the weight store's state, inside a MultiSync state
    case(
        "weights: versions of 3 workers",
        load("sync", weights_edited(lambda w: w.update(versions=torch.zeros(3, dtype=torch.int64)))),
        V,
        names("'versions'", "shape \\[3\\]"),
    ),
    case(
        "weights: versions as floats",
        load("sync", weights_edited(lambda w: w.update(versions=w["versions"].double()))),
        T,
        names("'versions'", "float64", "int64"),
    ),
    case(
        "weights: versions a list",
        load("sync", weights_edited(lambda w: w.update(versions=[0]))),
        T,
        names("'versions'", "got list"),
    ),
    case(
        "weights: an unknown model id",
        load("sync", weights_edited(lambda w: w["copies"].update(critic=w["copies"]["policy"]))),
        V,
        names("model ids \\['critic'\\]", "policy"),
    ),
    case(
        "weights: a weight of another shape",
        load(
            "sync",
            weights_edited(lambda w: w["copies"].update(policy=[TensorDict({"weight": torch.zeros(5)})])),
        ),
        V,
        names("'policy' entry 'weight'", "shape \\[5\\]", "\\[4\\]"),
    ),
    case(  # as a state saves it: a dict of tensors
        "weights: a weight of another shape, in a dict",
        load("sync", weights_edited(lambda w: w["copies"].update(policy=[{"weight": torch.zeros(5)}]))),
        V,
        names("'policy' entry 'weight'", "shape \\[5\\]", "\\[4\\]"),
    ),
    case(
        "weights: a weight of another dtype",
        load(
            "sync",
            weights_edited(
                lambda w: w["copies"].update(
                    policy=[TensorDict({"weight": torch.zeros(4, dtype=torch.float64)})]
                )
            ),
        ),
        T,
        names("'policy' entry 'weight'", "float64", "float32"),
    ),
    case(
        "weights: no 'pointers'",
        load("sync", weights_edited(lambda w: w.pop("pointers"))),
        V,
        names("WeightStore", "lacks", "pointers"),
    ),
]


CASES += [
    case("pipe weights: None", pipe_loads(lambda: None), T, names("PipeWeights.load_state_dict", "NoneType")),
    case("pipe weights: the weight store's state", pipe_loads(lambda: state_of("sync")["weights"]), V,
         names("PipeWeights", "state of a WeightStore")),
    case("pipe weights: versions of 3 workers", pipe_loads(lambda: {**pipe_state(), "versions": [0] * 3}), V,
         names("'versions'", "3 entries", "2 workers")),
    case("pipe weights: entries a dict", pipe_loads(lambda: {**pipe_state(), "entries": {}}), V,
         names("'entries'", "dict", "2 workers")),
    case("pipe weights: no entries",
         pipe_loads(lambda: {k: v for k, v in pipe_state().items() if k != "entries"}), V,
         names("PipeWeights", "lacks", "'entries'")),
]


def buffer_load(buffer: Callable[[], ReplayBuffer], state: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: buffer().load_state_dict(state())


def filled(capacity: int = 16, **kwargs: Any) -> ReplayBuffer:
    buffer = ReplayBuffer(capacity, **kwargs)
    buffer.extend(
        TensorDict(
            {
                "x": torch.arange(8.0),
                "next": {"done": torch.zeros(8, 1, dtype=torch.bool)},
                ("collector", "traj_ids"): torch.zeros(8, dtype=torch.int64),
            },
            batch_size=[8],
        )
    )
    return buffer


def buffer_state(**kwargs: Any) -> Callable[[], Any]:
    return lambda: filled(**kwargs).state_dict()


def storage_edited(**changes: Any) -> Callable[[], Any]:
    return lambda: {**filled().state_dict(), "storage": {**filled().state_dict()["storage"], **changes}}


uniform, prioritized = ReplayBuffer, functools.partial(ReplayBuffer, sampler="prioritized")
sliced = functools.partial(ReplayBuffer, sampler="slice", slice_len=2)
B = "ReplayBuffer.load_state_dict"
CASES += [
    case("buffer: None", buffer_load(lambda: uniform(16), lambda: None), T, names(B, "NoneType")),
    case("buffer: a list", buffer_load(lambda: uniform(16), lambda: [1]), T, names(B, "got list")),
    case("buffer: an empty dict", buffer_load(lambda: uniform(16), dict), V, names(B, "lacks", "'storage'")),
    case(
        "buffer: no sampler",
        buffer_load(lambda: uniform(16), lambda: {"storage": {}}),
        V,
        names(B, "lacks", "'sampler'"),
    ),
    case(
        "buffer: format 2",
        buffer_load(lambda: uniform(16), lambda: {**filled().state_dict(), "format": 2}),
        V,
        names(B, "format"),
    ),
    case(
        "buffer: a collector's state",
        buffer_load(lambda: uniform(16), lambda: state_of("single")),
        V,
        names(B, "state of a Collector"),
    ),
    case(
        "buffer: a prioritized buffer's state into a uniform one",
        buffer_load(lambda: uniform(16), buffer_state(sampler="prioritized")),
        V,
        names("UniformSampler.load_state_dict", "state of a PrioritizedSampler"),
    ),
    case(
        "buffer: a uniform buffer's state into a prioritized one",
        buffer_load(lambda: prioritized(16), buffer_state()),
        V,
        names("PrioritizedSampler.load_state_dict", "state of a UniformSampler"),
    ),
    case(
        "buffer: a slice buffer's state into a uniform one",
        buffer_load(lambda: uniform(16), buffer_state(sampler="slice", slice_len=2)),
        V,
        names("UniformSampler", "state of a SliceSampler"),
    ),
    case(
        "buffer: a prioritized buffer's state into a slice one",
        buffer_load(lambda: sliced(16), buffer_state(sampler="prioritized")),
        V,
        names("SliceSampler", "state of a PrioritizedSampler"),
    ),
    case(
        "buffer: another capacity",
        buffer_load(lambda: uniform(32), buffer_state()),
        V,
        names("capacity 16", "capacity=32"),
    ),
    case(
        "buffer: the storage state None",
        buffer_load(
            lambda: uniform(16),
            lambda: {**filled().state_dict(), "storage": None},
        ),
        T,
        names("Storage.load_state_dict", "NoneType"),
    ),
    case(
        "buffer: the storage without stamps",
        buffer_load(
            lambda: uniform(16),
            lambda: {
                **filled().state_dict(),
                "storage": {k: v for k, v in filled().state_dict()["storage"].items() if k != "stamps"},
            },
        ),
        V,
        names("Storage", "lacks", "'stamps'"),
    ),
    case(
        "buffer: stamps of 8 slots",
        buffer_load(lambda: uniform(16), storage_edited(stamps=torch.zeros(8, dtype=torch.int64))),
        V,
        names("'stamps'", "shape \\[8\\]", "\\[16\\]"),
    ),
    case(
        "buffer: stamps as floats",
        buffer_load(lambda: uniform(16), storage_edited(stamps=torch.zeros(16))),
        T,
        names("'stamps'", "float32", "int64"),
    ),
    case(
        "buffer: data a list",
        buffer_load(lambda: uniform(16), storage_edited(data=[torch.zeros(16)])),
        T,
        names("state\\['data'\\]", "a dict of tensors or None", "list"),
    ),
    case(  # a dict of tensors is how a state holds its data: one with other rows
        "buffer: data a dict of 5 rows",
        buffer_load(lambda: uniform(16), storage_edited(data={"x": torch.zeros(5)})),
        V,
        names("state\\['data'\\]", "capacity=16 rows"),
    ),
    case(
        "buffer: the sampler state a list",
        buffer_load(lambda: uniform(16), lambda: {**filled().state_dict(), "sampler": [0]}),
        T,
        names("UniformSampler.load_state_dict", "got list"),
    ),
]
def sampler(cls: type) -> Any:
    if cls is SliceSampler:
        return SliceSampler(16, None, slice_len=2)
    if cls is PrioritizedSampler:
        return PrioritizedSampler(16, None, alpha=0.6, beta=0.4, eps=1e-8)
    return UniformSampler(16)


def sampler_state(cls: type) -> dict[str, Any]:
    return dict(sampler(cls).state_dict())


for cls, other in (
    (UniformSampler, PrioritizedSampler),
    (PrioritizedSampler, SliceSampler),
    (SliceSampler, UniformSampler),
):
    name = cls.__name__
    make = functools.partial(sampler, cls)
    theirs = functools.partial(sampler_state, other)
    CASES += [
        case(f"{name}: None", lambda make=make: make().load_state_dict(None), T, names(name, "NoneType")),
        case(
            f"{name}: an empty dict",
            lambda make=make: make().load_state_dict({}),
            V,
            names(name, "lacks", "'rng'"),
        ),
        case(
            f"{name}: a {other.__name__}'s state",
            lambda make=make, theirs=theirs: make().load_state_dict(theirs()),
            V,
            names(name, f"state of a {other.__name__}"),
        ),
    ]
CASES += [
    case(
        "PrioritizedSampler: no leaves",
        lambda: sampler(PrioritizedSampler).load_state_dict(
            {k: v for k, v in filled(sampler="prioritized").state_dict()["sampler"].items() if k != "leaves"}
        ),
        V,
        names("PrioritizedSampler", "lacks", "'leaves'"),
    ),
    case(
        "prioritized buffer: leaves of another capacity",
        buffer_load(
            lambda: prioritized(16),
            lambda: {
                **filled(sampler="prioritized").state_dict(),
                "sampler": {
                    **filled(sampler="prioritized").state_dict()["sampler"],
                    "leaves": torch.zeros(8, dtype=torch.float64),
                },
            },
        ),
        V,
        names("'leaves'", "shape"),
    ),
    case(
        "SliceSampler: no accept_rate",
        lambda: sampler(SliceSampler).load_state_dict(
            {"kind": "SliceSampler", "rng": sampler(SliceSampler).state_dict()["rng"]}
        ),
        V,
        names("SliceSampler", "lacks", "'accept_rate'"),
    ),
]

# weight updates whose dtype is of another kind than the weight's
BAD_DTYPES = [torch.bool, torch.int64, torch.int32, torch.uint8, torch.complex64]
for dtype in BAD_DTYPES:
    weights = {"weight": torch.ones(4, dtype=dtype)}
    short = str(dtype).removeprefix("torch.")
    pattern = names("'weight'", short, "float32", "cannot update")
    CASES += [
        case(f"update: a {short} weight as weights=", update(weights=weights), T, pattern),
        case(f"update: a {short} weight as a TensorDict", update(TensorDict(weights)), T, pattern),
        case(
            f"update: a {short} weight to MultiSync",
            update(weights=weights, make=multi(policy=Linear4())),
            T,
            pattern,
        ),
        case(
            f"update: a {short} critic weight",
            update(weights_dict={"critic": {"weight": torch.ones(1, 4, dtype=dtype)}}),
            T,
            names("'critic'", short, "float32"),
        ),
    ]


def priorities(indices: Any) -> Callable[[], Any]:
    def build() -> Any:
        buffer = filled(sampler="prioritized")
        buffer.update_priority(indices, torch.ones(2))

    return build


CASES += [
    case(
        "update_priority: float32 indices",
        priorities(torch.tensor([0.5, 1.5])),
        T,
        names("indices must be integers", "float32"),
    ),
    case(
        "update_priority: float64 indices",
        priorities(torch.tensor([0.0, 1.0], dtype=torch.float64)),
        T,
        names("integers", "float64"),
    ),
    case("update_priority: a list of floats", priorities([0.9, 1.9]), T, names("integers", "float32")),
    case(
        "update_priority: bool indices", priorities(torch.tensor([True, False])), T, names("integers", "bool")
    ),
    case(
        "update_priority: complex indices",
        priorities(torch.tensor([1 + 0j, 2 + 0j])),
        T,
        names("integers", "complex"),
    ),
    case(
        "update_priority: half indices",
        priorities(torch.tensor([1.0, 2.0], dtype=torch.float16)),
        T,
        names("integers", "float16"),
    ),
]

# --device values the CLI cannot run a policy on, or store from
RUN = ["collect", "--frames", "16", "--num-envs", "2", "--out", "{out}", "--no-progress"]
CASES += [
    case(
        "cli: --device meta",
        cli(*RUN, "--device", "meta"),
        CliFailed,
        names("exit 2", "--device 'meta'", "cpu, cuda, mps"),
    ),
    case("cli: --device xpu", cli(*RUN, "--device", "xpu"), CliFailed, names("exit 2", "--device 'xpu'")),
    case("cli: --device hpu", cli(*RUN, "--device", "hpu"), CliFailed, names("exit 2", "--device 'hpu'")),
    case(
        "cli: --device mps",
        cli(*RUN, "--device", "mps"),
        CliFailed,
        names("exit 2", "--device 'mps'", "no MPS device") if not torch.backends.mps.is_available() else ".*",
    ),
    case(
        "cli: --device cuda:7",
        cli(*RUN, "--device", "cuda:7"),
        CliFailed,
        names("exit 2", "--device 'cuda:7'", "CUDA device"),
    ),
    case(
        "cli: --device 'cpu:x'",
        cli(*RUN, "--device", "cpu:x"),
        CliFailed,
        names("exit 2", "--device 'cpu:x'", "not a torch device"),
    ),
]


@pytest.mark.parametrize("build,error,pattern", CASES)
def test_bad_state_or_value_is_refused_with_a_clear_message(
    request: pytest.FixtureRequest, build: Callable[[], Any], error: Any, pattern: str
) -> None:
    assert_refused(request.node.callspec.id, build, error, pattern)


def test_the_table_has_at_least_100_cases() -> None:
    assert len(CASES) >= 100
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_refused_state_changes_nothing_and_a_good_one_still_loads(kind: str) -> None:
    """A collector that refused a state goes on as before: its own state still loads into it."""
    made = source(kind)
    try:
        next(iter(made))
        own = made.state_dict()
        for bad in (None, {}, state_of("sync" if kind != "sync" else "async")):
            with pytest.raises((TypeError, ValueError)):
                made.load_state_dict(bad)
        made.load_state_dict(own)
        assert next(iter(made)) is not None
    finally:
        made.shutdown()


def make_dropping_env(key: str) -> Any:
    """CartPole as a TorchRL env whose third step leaves ``key`` out of what it returns."""
    from torchrl.envs import GymEnv, Transform, TransformedEnv

    class DropAtThirdStep(Transform):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def _step(self, tensordict: Any, next_tensordict: Any) -> Any:
            self.count += 1
            return next_tensordict.exclude(key) if self.count == 3 else next_tensordict

        def _reset(self, tensordict: Any, tensordict_reset: Any) -> Any:
            return tensordict_reset

    return TransformedEnv(GymEnv("CartPole-v1"), DropAtThirdStep())


@pytest.mark.parametrize("key", ["observation", "terminated"])  # no reward: TorchRL itself raises
def test_a_torchrl_env_step_that_drops_a_key_is_an_error_naming_it(key: str) -> None:
    from rlcollect.data.checks import BadDataError

    made = Collector(functools.partial(make_dropping_env, key), frames_per_batch=8, total_frames=8)
    with made, pytest.raises(BadDataError, match=names(f"\\('next', '{key}'\\)", "at step 2", "missing")):
        list(made)
