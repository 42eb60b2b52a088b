"""Every option through every collector: the batches equal the single-process collector's.

The reference is ``Collector`` with 4 envs. ``MultiSyncCollector`` and a synchronous
``RayCollector`` (2 workers x 2 envs) must yield the same batches, trajectory ids aside (each
collector numbers them in its own strided space; they are checked unique and changing exactly
after a done). ``MultiAsyncCollector``, ``AsyncBatchedCollector`` (its policy served from this
process) and an asynchronous ``RayCollector`` yield one worker's
``[2, T]`` rows at a time; worker ``w``'s ``k``-th batch must equal rows ``2w, 2w + 1`` of the
reference's ``k``-th batch (also with ``env_groups=2``: each worker steps its envs one at a time
while the server acts for the other). Where an option regroups frames (``split_trajs``, ``trajs_per_batch``),
the trajectories are compared as a multiset. Random warm-up actions (``init_random_frames``) are
compared as any others: each env draws them from a stream of its own, whichever worker steps it.

This test is what keeps the collectors from drifting apart: a new option gets a case here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from rlcollect.collectors.delivery import ReplayWriter
from rlcollect.data.formats import BatchShape
from rlcollect.torchrl import TorchRLLayout
from rlcollect.weights import RayWeightSyncScheme, SharedMemWeightSyncScheme
from tests.envs_for_tests import TiltPolicy, assert_ids_label_trajectories, make_cartpole, make_cartpole_info

pytestmark = pytest.mark.timeout(120)

T, BATCHES, SEED = 10, 4, 3  # steps per batch, batches per run (of 4 envs' frames)


class ListSink:
    """A replay buffer that keeps what it is given."""

    def __init__(self) -> None:
        self.items: list[TensorDictBase] = []

    def extend(self, frames: TensorDictBase) -> None:
        self.items.append(frames.clone())


def add_doubled_reward(batch: TensorDictBase) -> TensorDictBase:
    batch.set("doubled_reward", batch["next", "reward"] * 2)
    return batch


class DoubledReward:
    """A batch step (``batch_steps``): adds the doubled reward."""

    def __call__(self, batch: TensorDictBase, shape: BatchShape) -> TensorDictBase:
        return batch.set("doubled_reward", batch["next", "reward"] * 2)


# name -> (options, how the outputs compare: "frames", "trajectories", "unseeded", "sink")
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "defaults": ({}, "frames"),
    "max_frames_per_traj=-1": ({"max_frames_per_traj": -1}, "frames"),
    "max_frames_per_traj=0": ({"max_frames_per_traj": 0}, "frames"),
    "max_frames_per_traj=7": ({"max_frames_per_traj": 7}, "frames"),
    "reset_at_each_iter": ({"reset_at_each_iter": True}, "frames"),
    "set_truncated": ({"set_truncated": True}, "frames"),
    "exploration_type": ({"exploration_type": "deterministic"}, "frames"),
    "return_same_td": ({"return_same_td": True}, "frames"),
    "postproc": ({"postproc": add_doubled_reward}, "frames"),
    "seed=None": ({"seed": None}, "unseeded"),
    "init_random_frames": ({"init_random_frames": 4 * T}, "frames"),
    "split_trajs": ({"split_trajs": True}, "trajectories"),
    "trajs_per_batch": ({"trajs_per_batch": 3, "max_frames_per_traj": 8}, "trajectories"),
    "replay_buffer": ({"replay_buffer": "sink"}, "sink"),
    "weight_sync_schemes": ({"weight_sync_schemes": "explicit"}, "frames"),
    "check=batch": ({"check": "batch"}, "frames"),
    "check=off": ({"check": "off"}, "frames"),
    "obs_dtype=float64": ({"obs_dtype": "float64"}, "frames"),
    "layout=torchrl": ({"layout": TorchRLLayout()}, "frames"),
    "track_policy_version": ({"layout": TorchRLLayout(track_policy_version=True)}, "frames"),
    "batch_steps": ({"batch_steps": [DoubledReward()]}, "frames"),
    "replay_writer": ({"replay_buffer": "sink", "replay_writer": ReplayWriter(time_major=True)}, "sink"),
    "compile_policy": ({"compile_policy": {"backend": "eager"}}, "frames"),
    "info_keys": ({"info_keys": ["x", "steps", "upright", "pair"], "env": make_cartpole_info}, "frames"),
    "policy_factory": ({"policy_factory": TiltPolicy}, "frames"),  # no policy: the workers build it
}
PER_WORKER = ("max_frames_per_traj", "reset_at_each_iter", "set_truncated", "exploration_type",
              "init_random_frames", "compile_policy")  # RayCollector takes these in collector_kwargs


def build(kind: str, options: dict[str, Any], batches: int) -> Any:
    """A collector of ``kind`` with 4 envs in all, seeded ``SEED`` unless ``options`` says."""
    options = {"seed": SEED, **options}
    make_env = options.pop("env", make_cartpole)
    policy = None if "policy_factory" in options else TiltPolicy()
    rows = 4 if kind in ("single", "sync", "ray-sync") else 2
    frames = {"frames_per_batch": rows * T, "total_frames": 4 * T * batches}
    if kind == "single":
        return Collector(make_env, policy, num_envs=4, **frames, **options)
    if kind in ("sync", "async"):
        cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
        return cls(make_env, policy, num_workers=2, num_envs_per_worker=2, **frames, **options)
    if kind.startswith("batched"):  # one policy server in this process, 2 env workers x 2 envs
        groups = 2 if kind == "batched-groups" else 1  # each worker's envs stepped one at a time
        return AsyncBatchedCollector(make_env, policy, num_envs=4, envs_per_worker=2, env_groups=groups,
                                     **frames, **options)
    per_worker = {k: v for k, v in options.items() if k in PER_WORKER}
    top = {k: v for k, v in options.items() if k not in PER_WORKER}
    return RayCollector(make_env, policy, num_collectors=2, sync=kind == "ray-sync",
                        collector_kwargs={"num_envs": 2, **per_worker}, **frames, **top)


def run(kind: str, options: dict[str, Any], batches: int = BATCHES) -> tuple[list[TensorDictBase], Any]:
    """The outputs of one whole run (a sink's contents when it has one) and the sink."""
    sink = ListSink() if options.get("replay_buffer") == "sink" else None
    options = {**options, "replay_buffer": sink} if sink is not None else options
    if options.get("weight_sync_schemes") == "explicit":  # a scheme object serves one collector: a fresh one
        scheme = RayWeightSyncScheme() if kind.startswith("ray") else SharedMemWeightSyncScheme()
        options = {**options, "weight_sync_schemes": {"policy": scheme}}
    with build(kind, options, batches) as collector:
        out = [b.clone() if b is not None else None for b in collector]
    if sink is not None:
        assert out == [None] * len(out)
        rows = 4 if kind in ("single", "sync", "ray-sync") else 2
        if options.get("replay_writer") is not None:  # step by step: every env's frame of a step, ...
            out = [item.reshape(T, rows).transpose(0, 1) for item in sink.items]
        else:
            out = [item.reshape(rows, T) for item in sink.items]
    return out, sink


def drop_ids(batch: TensorDictBase) -> TensorDictBase:
    return batch.exclude(("collector", "traj_ids"))


def dtypes(batch: TensorDictBase) -> dict[Any, torch.dtype]:
    """Each leaf's dtype (``==`` on TensorDicts compares values across dtypes)."""
    return {key: value.dtype for key, value in batch.items(True, True)}


def by_worker(batches: list[TensorDictBase]) -> dict[int, list[TensorDictBase]]:
    """Asynchronous batches grouped by the worker that produced them (ids are strided by worker)."""
    groups: dict[int, list[TensorDictBase]] = {}
    for batch in batches:
        workers = (batch["collector", "traj_ids"] % 2).unique().tolist()
        assert len(workers) == 1
        groups.setdefault(int(workers[0]), []).append(batch)
    return groups


def trajectory_keys(outputs: list[TensorDictBase]) -> Counter[bytes]:
    """Each trajectory (a row, its mask applied, or a flat 'cat' run) as bytes of its frames."""
    keys: Counter[bytes] = Counter()
    for out in outputs:
        rows = out if out.batch_dims == 2 else out.unsqueeze(0)
        for row in rows:
            mask = row.get(("collector", "mask"), torch.ones(row.shape, dtype=torch.bool))
            frames = row[mask]
            for traj in frames["collector", "traj_ids"].unique():
                piece = frames[frames["collector", "traj_ids"] == traj]
                keys[piece["observation"].numpy().tobytes() + piece["action"].numpy().tobytes()
                     + piece["next", "done"].numpy().tobytes()] += 1
    return keys


def compare(kind: str, how: str, got: list[TensorDictBase], reference: Callable[[int], list[TensorDictBase]],
            cut_keeps_ids: bool = False) -> None:
    synchronous = kind in ("sync", "ray-sync")
    # TorchRL's layout stacks a synchronous batch by worker ([workers, envs, T], cat_results="stack")
    got = [b.reshape(-1, b.shape[-1]) if b is not None and b.batch_dims > 2 else b for b in got]
    if how == "trajectories":
        want = trajectory_keys(reference(BATCHES if synchronous else 2 * BATCHES))
        have = trajectory_keys(got)
        assert have and (have == want if synchronous else not have - want)
        return
    if how == "unseeded":
        assert all(b.batch_size == got[0].batch_size for b in got)
        assert_ids_label_trajectories(got if synchronous else by_worker(got)[0])
        return
    if synchronous:
        want = reference(BATCHES)
        assert len(got) == len(want)
        for have, expected in zip(got, want, strict=True):
            assert (drop_ids(have) == drop_ids(expected)).all() and dtypes(have) == dtypes(expected)
        assert_ids_label_trajectories(got, cut_keeps_ids)
        return
    want = reference(2 * BATCHES)
    assert len(got) == 2 * BATCHES
    for worker, batches in by_worker(got).items():
        for k, have in enumerate(batches):
            expected = want[k][2 * worker : 2 * worker + 2]
            assert (drop_ids(have) == drop_ids(expected)).all() and dtypes(have) == dtypes(expected)
        assert_ids_label_trajectories(batches, cut_keeps_ids)


_references: dict[tuple[str, int], list[TensorDictBase]] = {}


def reference_for(name: str) -> Callable[[int], list[TensorDictBase]]:
    def batches(count: int) -> list[TensorDictBase]:
        if (name, count) not in _references:
            _references[name, count] = run("single", CASES[name][0], count)[0]
        return _references[name, count]

    return batches


@pytest.mark.parametrize("kind", ["sync", "async", "batched"])
@pytest.mark.parametrize("name", list(CASES))
def test_multi_process_collectors_match_the_single_process_one(kind: str, name: str) -> None:
    options, how = CASES[name]
    got, _ = run(kind, options)
    compare(kind, how, got, reference_for(name), cut_keeps_ids=name == "set_truncated")
    if name == "postproc":
        assert all(torch.equal(b["doubled_reward"], 2 * b["next", "reward"]) for b in got)


#: the cases that reach AsyncBatchedCollector's workers stepping their envs in groups (env_groups=2)
GROUPED = ("defaults", "max_frames_per_traj=7", "reset_at_each_iter", "set_truncated", "init_random_frames",
           "trajs_per_batch", "check=off", "info_keys", "obs_dtype=float64")


@pytest.mark.parametrize("name", GROUPED)
def test_workers_stepping_their_envs_in_groups_match_the_single_process_collector(name: str) -> None:
    options, how = CASES[name]
    got, _ = run("batched-groups", options)
    compare("batched-groups", how, got, reference_for(name), cut_keeps_ids=name == "set_truncated")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", list(CASES))
def test_ray_collector_matches_the_single_process_one(ray_session: None, name: str) -> None:
    options, how = CASES[name]
    for kind in ("ray-sync", "ray-async"):
        got, _ = run(kind, options)
        compare(kind, how, got, reference_for(name), cut_keeps_ids=name == "set_truncated")


def test_single_process_collector_matches_itself_and_its_sink() -> None:
    """The reference itself: a second run is identical, and a sink receives the same frames."""
    first, second = run("single", {}), run("single", {})
    assert all((a == b).all() for a, b in zip(first[0], second[0], strict=True))
    sunk, _ = run("single", {"replay_buffer": "sink"})
    assert all((a == b).all() for a, b in zip(first[0], sunk, strict=True))


@pytest.mark.parametrize("kind", ["single", "sync"])
def test_init_random_frames_past_a_batch_start_makes_that_whole_batch_random(kind: str) -> None:
    """``init_random_frames`` counts whole batches (TorchRL rounds it up to a multiple of
    ``frames_per_batch``): a synchronous batch starting below it is random in every worker (the
    second worker of ``MultiSyncCollector`` used to take its policy's actions in that batch)."""
    rounded, _ = run(kind, {"init_random_frames": 8 * T})  # two whole batches of 4 envs x T steps
    got, _ = run(kind, {"init_random_frames": 5 * T})
    assert len(got) == len(rounded) == BATCHES
    for have, expected in zip(got, rounded, strict=True):
        assert (drop_ids(have) == drop_ids(expected)).all()
