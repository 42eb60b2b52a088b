"""``collector.episodes()``: a record of every episode that ended, the same in every collector.

The reference is written plainly from the delivered batches: each trajectory id whose frames
include a done is an episode; its return is the sum of its frames' rewards, its length their count,
its env the row of its frames (in the collector's env numbering), its policy version that of its
last frame, its worker the one whose id space the id is in.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import (
    AsyncBatchedCollector,
    Collector,
    MultiAsyncCollector,
    MultiSyncCollector,
    RayCollector,
    ReplayBuffer,
)
from rlcollect.collectors.loggers import CollectorLogger
from tests.envs_for_tests import TiltPolicy, make_cartpole, make_cartpole_info

pytestmark = pytest.mark.timeout(120)

T = 25  # steps per batch; 4 envs in all, 2 per worker where there are workers


def build(kind: str, env: Any = make_cartpole, **options: Any) -> Any:
    rows = 4 if kind in ("single", "sync", "ray-sync") else 2
    frames = {"frames_per_batch": rows * T, "total_frames": 4 * T * 6, "seed": 5, **options}
    if kind == "single":
        return Collector(env, TiltPolicy(), num_envs=4, **frames)
    if kind in ("sync", "async"):
        cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
        return cls(env, TiltPolicy(), num_workers=2, num_envs_per_worker=2, **frames)
    if kind == "batched":
        return AsyncBatchedCollector(env, TiltPolicy(), num_envs=4, envs_per_worker=2, **frames)
    return RayCollector(env, TiltPolicy(), num_collectors=2, sync=kind == "ray-sync",
                        collector_kwargs={"num_envs": 2}, **frames)


def reference(batches: list[TensorDictBase], kind: str, end: str = "done") -> dict[int, dict[str, Any]]:
    """``{traj_id: record}`` of the episodes that ended in ``batches`` (a frame whose
    ``("next", end)`` is set ends one), one frame at a time."""
    sums: dict[int, dict[str, Any]] = {}
    ended: dict[int, dict[str, Any]] = {}
    for batch in batches:
        rows, steps = batch.batch_size
        for row in range(rows):
            for t in range(steps):
                traj = int(batch["collector", "traj_ids"][row, t])
                worker = traj % 2 if kind != "single" else 0
                env = row if rows == 4 else 2 * worker + row  # one worker's rows: its envs
                record = sums.setdefault(traj, {"return": 0.0, "length": 0, "env": env, "worker": worker})
                record["return"] += float(batch["next", "reward"][row, t])
                record["length"] += 1
                assert record["env"] == env
                if batch["next", end][row, t]:
                    record["policy_version"] = int(batch["policy_version"][row, t])
                    if ("next", "info") in batch.keys(True):  # info_keys: the values of the last step
                        record["info"] = {key: value[row, t] for key, value in batch["next", "info"].items()}
                    ended[traj] = record
    return ended


def assert_records_match(table: TensorDictBase, expected: dict[int, dict[str, Any]]) -> None:
    assert table["traj_id"].tolist() and sorted(table["traj_id"].tolist()) == sorted(expected)
    for i, traj in enumerate(table["traj_id"].tolist()):
        want = expected[traj]
        assert table["return"][i].item() == pytest.approx(want["return"], abs=1e-9), traj
        for name in ("length", "env", "worker", "policy_version"):
            assert table[name][i].item() == want[name], (traj, name)
        for key, value in want.get("info", {}).items():
            assert torch.equal(table["info", key][i], value), (traj, key)
    assert table["return"].dtype == torch.float64 and table["length"].dtype == torch.int64


@pytest.mark.parametrize("kind", ["single", "sync", "async", "batched"])
def test_every_collector_records_the_episodes_of_its_batches(kind: str) -> None:
    with build(kind) as collector:
        batches, tables = [], []
        for batch in collector:
            batches.append(batch.clone())
            if len(batches) == 3:  # drained part way: nothing is lost or given twice
                tables.append(collector.episodes())
                if kind == "sync":  # weights bumped: the later episodes carry the new version
                    collector.update_policy_weights_()
        tables.append(collector.episodes())
        assert collector.episodes().batch_size == torch.Size([0])
    table = torch.cat(tables)
    assert_records_match(table, reference(batches, kind))
    assert table.batch_size[0] == collector.stats().episodes


@pytest.mark.parametrize("kind", ["single", "sync", "async", "batched"])
def test_an_episode_cut_by_a_reset_between_batches_counts_in_no_later_one(kind: str) -> None:
    """``reset_at_each_iter``: the episodes in progress at a batch's end are abandoned (their last
    frames marked truncated by the collector, not ended by the env); an episode recorded later
    holds only its own frames. With 39 steps a batch, no episode reaches the env's 40-step limit
    on a batch's last frame: a done there is the collector's cut, anywhere else the env's end."""
    rows = 4 if kind in ("single", "sync") else 2
    frames = {"frames_per_batch": rows * 39, "total_frames": 4 * 39 * 6}
    with build(kind, reset_at_each_iter=True, **frames) as collector:
        batches = [batch.clone() for batch in collector]
        table = collector.episodes()
    for batch in batches:
        ended = batch["next", "done"].clone()
        ended[:, -1] = batch["next", "terminated"][:, -1]
        batch["next", "ended"] = ended
        assert (batch["next", "done"][:, -1]).all()  # every row is cut
    expected = reference(batches, kind, end="ended")
    assert len(expected) >= 4  # some episodes ended within a batch
    assert_records_match(table, expected)


@pytest.mark.parametrize("kind", ["single", "sync"])
@pytest.mark.parametrize("how", ["set_seed", "reset"])
def test_an_episode_abandoned_by_set_seed_or_reset_counts_in_no_later_one(kind: str, how: str) -> None:
    with build(kind) as collector:
        batches = []
        for batch in collector:
            batches.append(batch.clone())
            if len(batches) == 2:
                collector.set_seed(11) if how == "set_seed" else collector.reset()
        table = collector.episodes()
    for batch in batches:
        assert not batch["next", "done"][:, -1].all()  # the collector did not cut the rows
    assert_records_match(table, reference(batches, kind))


@pytest.mark.parametrize("kind", ["single", "sync", "async", "batched"])
def test_episodes_carry_the_info_keys_values_at_their_last_step(kind: str) -> None:
    """``info_keys``: each record holds the values of its episode's last step (a success flag's
    rate over episodes, as SB3 logs it); the table has them even before any episode ended."""
    keys = ["x", "steps", "upright", "pair"]
    with build(kind, make_cartpole_info, info_keys=keys) as collector:
        assert set(collector.episodes()["info"].keys()) == set(keys)
        batches = [batch.clone() for batch in collector]
        table = collector.episodes()
    expected = reference(batches, kind)
    assert all("info" in record for record in expected.values())
    assert_records_match(table, expected)
    assert torch.equal(table["info", "steps"], table["length"])  # the env counts the episode's steps
    assert table["info", "pair"].shape == (len(table), 2) and table["info", "upright"].dtype == torch.bool
    metrics = CollectorLogger.metrics(table, collector.stats())
    assert metrics["episode/info/steps_mean"] == pytest.approx(metrics["episode/length_mean"])
    assert "episode/info/pair_mean" not in metrics  # one number per episode only


@pytest.mark.parametrize("kind", ["ray-sync", "ray-async"])
def test_ray_collectors_record_the_episodes_of_their_batches(ray_session: None, kind: str) -> None:
    with build(kind, make_cartpole_info, info_keys=["steps"]) as collector:  # info values too
        batches = [batch.clone() for batch in collector]
        table = collector.episodes()
    assert_records_match(table, reference(batches, kind))
    assert torch.equal(table["info", "steps"], table["length"])


@pytest.mark.parametrize("kind", ["single", "async"])
def test_background_collection_records_episodes_too(kind: str) -> None:
    buffer = ReplayBuffer(10_000, storage="shared" if kind == "async" else "memory", batch_size=8)
    collector = build(kind, replay_buffer=buffer, total_frames=-1)
    collector.start()
    try:
        deadline = time.monotonic() + 60
        table = collector.episodes()
        while table.batch_size[0] < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
            table = torch.cat([table, collector.episodes()])
    finally:
        collector.async_shutdown()
    assert table.batch_size[0] >= 5
    # TiltPolicy pushes each pole over within tens of steps: every episode ends by termination
    assert (table["length"] > 0).all() and torch.equal(table["return"], table["length"].double())
    assert set(table["env"].tolist()) <= {0, 1, 2, 3}


@pytest.mark.parametrize("kind", ["sync", "async", "batched"])
def test_the_same_seed_gives_the_same_episodes_in_every_collector(kind: str) -> None:
    """Against a longer run of ``Collector`` with the same seed: the same episodes of each env, in
    the order they ended, as far as the collector's batches went."""
    with build("single", total_frames=4 * T * 12) as collector:  # longer: covers a worker run ahead
        for _ in collector:
            pass
        expected = per_env(collector.episodes())
    with build(kind) as collector:
        for _ in collector:
            pass
        got = per_env(collector.episodes())
    assert set(got) <= set(expected) and sum(map(len, got.values())) > 0
    for env, records in got.items():  # (asynchronous: one worker may be a batch ahead of the other)
        assert records == expected[env][: len(records)], env


def per_env(table: TensorDictBase) -> dict[int, list[tuple[float, int, int]]]:
    """``{env: [(return, length, policy_version), ...]}`` in the order the episodes ended."""
    out: dict[int, list[tuple[float, int, int]]] = {}
    for i in range(len(table)):
        out.setdefault(int(table["env"][i]), []).append(
            (float(table["return"][i]), int(table["length"][i]), int(table["policy_version"][i])))
    return out
