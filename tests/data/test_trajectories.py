"""Trajectory ids, splitting, padding and assembling, each compared with a plain step-by-step version."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import BatchLayout, Field
from rlcollect.data.trajectories import (
    TrajectoryAssembler,
    TrajectoryIds,
    pad_trajectories,
    split_trajectories,
)

# -- trajectory ids ---------------------------------------------------------------------------


def reference_ids(
    num_envs: int,
    batches: list[np.ndarray],
    restarts: list[bool],
    *,
    stride: int = 1,
    offset: int = 0,
    start: int = 0,
) -> list[np.ndarray]:
    """Ids frame by frame: env n starts with local id start + n; a new trajectory starts at frame 0
    after a restart and at the frame after every done; new ids go out in time order, then env order."""
    next_local = start + num_envs
    current = [start + n for n in range(num_envs)]
    starting = [False] * num_envs
    out = []
    for done, restart in zip(batches, restarts, strict=True):
        if restart:
            starting = [True] * num_envs
        steps = done.shape[1]
        ids = np.zeros((num_envs, steps), dtype=np.int64)
        for t in range(steps):
            for n in range(num_envs):
                begins = starting[n] if t == 0 else bool(done[n, t - 1])
                if begins:
                    current[n] = next_local
                    next_local += 1
                ids[n, t] = current[n] * stride + offset
        if steps:
            starting = [bool(done[n, steps - 1]) for n in range(num_envs)]
        out.append(ids)
    return out


def run_ids(ids: TrajectoryIds, batches: list[np.ndarray], restarts: list[bool]) -> list[np.ndarray]:
    out = []
    for done, restart in zip(batches, restarts, strict=True):
        if restart:
            ids.restart()
        labels = np.full(done.shape, -7, dtype=np.int64)
        ids.assign(done, labels)
        out.append(labels)
    return out


@st.composite
def done_streams(draw: st.DrawFn, num_envs: int) -> tuple[list[np.ndarray], list[bool]]:
    num_batches = draw(st.integers(1, 5))
    batches, restarts = [], []
    for _ in range(num_batches):
        steps = draw(st.integers(0, 5))  # 0: a batch preempted before its first step
        bits = draw(st.lists(st.booleans(), min_size=num_envs * steps, max_size=num_envs * steps))
        batches.append(np.array(bits, dtype=bool).reshape(num_envs, steps))
        restarts.append(draw(st.booleans()))
    return batches, restarts


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_ids_equal_the_step_by_step_reference_and_are_proper_labels(data: st.DataObject) -> None:
    num_envs = data.draw(st.integers(1, 4), label="num_envs")
    stride = data.draw(st.integers(1, 4), label="stride")
    offset = data.draw(st.integers(0, stride - 1), label="offset")
    start = data.draw(st.integers(0, 50), label="start")
    batches, restarts = data.draw(done_streams(num_envs), label="batches")

    got = run_ids(TrajectoryIds(num_envs, stride=stride, offset=offset, start=start), batches, restarts)
    expected = reference_ids(num_envs, batches, restarts, stride=stride, offset=offset, start=start)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, e)

    # properties, independent of the order ids are handed out in
    stream_ids = np.concatenate(got, axis=1)
    stream_done = np.concatenate(batches, axis=1)
    boundary_restart = np.zeros(stream_done.shape[1], dtype=bool)  # frame t starts after a restart()
    position = 0
    for done, restart in zip(batches, restarts, strict=True):
        # a restart before an empty batch still starts a trajectory at the next real frame
        if restart and 0 < position < len(boundary_restart):
            boundary_restart[position] = True
        position += done.shape[1]
    segments = 0
    for n in range(num_envs):
        row = stream_ids[n]
        if len(row) == 0:
            continue
        assert np.all((row - offset) % stride == 0), "ids outside this producer's stride"
        assert np.all(row >= start * stride + offset)
        assert np.all(np.diff(row) >= 0), "ids decrease along an env's row"
        changes = row[1:] != row[:-1]
        expected_changes = stream_done[n, :-1] | boundary_restart[1:]
        np.testing.assert_array_equal(changes, expected_changes)
        segments += 1 + int(changes.sum())
    assert len(np.unique(stream_ids)) == segments, "two trajectories share an id"


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_strided_producers_never_share_an_id(data: st.DataObject) -> None:
    stride = data.draw(st.integers(1, 4), label="stride")
    num_envs = data.draw(st.integers(1, 3), label="num_envs")
    start = data.draw(st.integers(0, 10), label="start")
    seen: dict[int, int] = {}
    for offset in range(stride):
        batches, restarts = data.draw(done_streams(num_envs), label=f"producer {offset}")
        got = run_ids(TrajectoryIds(num_envs, stride=stride, offset=offset, start=start), batches, restarts)
        for labels in got:
            for value in np.unique(labels).tolist():
                assert seen.setdefault(value, offset) == offset, f"id {value} from two producers"
                assert value % stride == offset


def test_ids_by_hand_example() -> None:
    ids = TrajectoryIds(num_envs=2, stride=3, offset=1, start=4)
    out = np.zeros((2, 4), dtype=np.int64)
    ids.assign(np.array([[False, True, False, True], [True, False, False, False]]), out)
    # local ids: env 0 -> 4, env 1 -> 5; new: (t=1, env 1) -> 6, (t=2, env 0) -> 7
    assert out.tolist() == [[13, 13, 22, 22], [16, 19, 19, 19]]
    assert ids.next_local_id == 8
    ids.assign(np.array([[False, False], [False, False]]), out[:, :2])
    assert out[:, :2].tolist() == [[25, 25], [19, 19]]  # env 0 ended its last batch with done
    assert ids.next_local_id == 9
    ids.restart()
    ids.assign(np.array([[False], [False]]), out[:, :1])
    assert out[:, 0].tolist() == [3 * 9 + 1, 3 * 10 + 1]


def test_empty_batch_changes_nothing() -> None:
    ids = TrajectoryIds(num_envs=2)
    out = np.zeros((2, 2), dtype=np.int64)
    ids.assign(np.array([[False, True], [False, False]]), out)
    ids.assign(np.zeros((2, 0), dtype=bool), np.zeros((2, 0), dtype=np.int64))
    ids.assign(np.array([[False], [False]]), out[:, :1])
    assert out[:, 0].tolist() == [2, 1]  # env 0 still starts a new trajectory after its done


def test_state_dict_continues_the_same_sequence() -> None:
    rng = np.random.default_rng(3)
    batches = [rng.random((3, 4)) < 0.3 for _ in range(6)]
    original = TrajectoryIds(3, stride=2, offset=1, start=5)
    first = run_ids(original, batches[:3], [False] * 3)
    state = original.state_dict()
    rest = run_ids(original, batches[3:], [False] * 3)
    restored = TrajectoryIds(3, stride=2, offset=1)
    restored.load_state_dict(state)
    again = run_ids(restored, batches[3:], [False] * 3)
    for a, b in zip(rest, again, strict=True):
        np.testing.assert_array_equal(a, b)
    expected = reference_ids(3, batches, [False] * 6, stride=2, offset=1, start=5)
    for g, e in zip(first + rest, expected, strict=True):
        np.testing.assert_array_equal(g, e)
    state["current"][:] = -1  # the state is a copy, not the allocator's own arrays
    assert restored.state_dict()["current"].min() >= 0


@pytest.mark.parametrize(("stride", "offset"), [(1, 1), (2, 2), (2, -1), (3, 5)])
def test_offset_outside_the_stride_is_rejected(stride: int, offset: int) -> None:
    with pytest.raises(ValueError, match=r"offset must be in \[0, stride="):
        TrajectoryIds(2, stride=stride, offset=offset)


# -- split_trajectories -------------------------------------------------------------------------


def make_batch(done: np.ndarray, ids: np.ndarray) -> TensorDict:
    n, t = done.shape
    frame = torch.arange(n * t).view(n, t)
    return TensorDict(
        {
            "x": (100 * frame).float(),
            "obs": torch.stack([frame, -frame], -1).to(torch.int32),
            "action": frame % 2 == 0,
            ("next", "reward"): frame.float()[..., None] / 2,
            ("next", "done"): torch.from_numpy(done)[..., None],
            ("collector", "traj_ids"): torch.from_numpy(ids),
        },
        batch_size=[n, t],
    )


def cut_by_hand(batch: TensorDict) -> list[tuple[int, list[tuple[int, int]]]]:
    """(id, frames as (env, t)) per trajectory, in the order they appear row by row (TorchRL's):
    each env's row is cut after every done (a trajectory running past the batch edge is the part
    in the batch)."""
    done = batch["next", "done"][..., 0].tolist()
    ids = batch["collector", "traj_ids"].tolist()
    pieces: list[list[tuple[int, int]]] = []
    for env, row in enumerate(done):
        piece: list[tuple[int, int]] = []
        for t, ended in enumerate(row):
            piece.append((env, t))
            if ended or t == len(row) - 1:
                pieces.append(piece)
                piece = []
    labelled = []
    for piece in pieces:
        (traj,) = {ids[env][t] for env, t in piece}  # one id per episode piece
        labelled.append((traj, piece))
    assert len({traj for traj, _ in labelled}) == len(labelled), "two pieces share an id"
    return labelled


def check_split(batch: TensorDict) -> None:
    out = split_trajectories(batch)
    expected = cut_by_hand(batch)
    max_len = max(len(frames) for _, frames in expected)
    assert out.batch_size == torch.Size([len(expected), max_len])
    assert out.names == [None, "time"]
    mask = out["collector", "mask"]
    assert mask.dtype == torch.bool
    for key, value in batch.items(include_nested=True, leaves_only=True):
        got = out[key]
        assert got.dtype == value.dtype, key
        assert got.shape == (len(expected), max_len, *value.shape[2:]), key
        padded = torch.zeros_like(got)
        for row, (_, frames) in enumerate(expected):
            for col, (env, t) in enumerate(frames):
                padded[row, col] = value[env, t]
        assert torch.equal(got, padded), key
    expected_mask = torch.zeros(len(expected), max_len, dtype=torch.bool)
    for row, (_, frames) in enumerate(expected):
        expected_mask[row, : len(frames)] = True
    assert torch.equal(mask, expected_mask)
    # each row's real frames carry one id, the row's, in the order the trajectories first appear
    row_ids = [traj for traj, _ in expected]
    assert out["collector", "traj_ids"][:, 0].tolist() == row_ids


def test_split_by_hand_example() -> None:
    done = np.array([[False, True, False, False], [True, False, False, True]])
    ids = np.array([[0, 0, 2, 2], [1, 3, 3, 3]])
    out = split_trajectories(make_batch(done, ids))
    assert out["x"].tolist() == [
        [0.0, 100.0, 0.0],
        [200.0, 300.0, 0.0],
        [400.0, 0.0, 0.0],
        [500.0, 600.0, 700.0],
    ]
    assert out["next", "done"][..., 0].tolist() == [
        [False, True, False],
        [False, False, False],
        [True, False, False],
        [False, False, True],
    ]
    assert out["collector", "mask"].tolist() == [
        [True, True, False],
        [True, True, False],
        [True, False, False],
        [True, True, True],
    ]
    check_split(make_batch(done, ids))


@settings(max_examples=60, deadline=None)
@given(
    num_envs=st.integers(1, 4),
    steps=st.integers(1, 6),
    end_rate=st.floats(0.0, 1.0),
    stride=st.integers(1, 3),
    seed=st.integers(0, 10_000),
)
def test_split_equals_episodes_cut_by_hand(
    num_envs: int, steps: int, end_rate: float, stride: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    allocator = TrajectoryIds(num_envs, stride=stride, offset=stride - 1)
    ids = np.zeros((num_envs, steps), dtype=np.int64)
    allocator.assign(rng.random((num_envs, steps)) < end_rate, ids)  # a first batch: ids not from 0
    done = rng.random((num_envs, steps)) < end_rate
    allocator.assign(done, ids)
    check_split(make_batch(done, ids))


def test_split_of_a_collector_batch_keeps_its_keys_and_time_name() -> None:
    layout = BatchLayout(
        (Field(("observation",), (2,), torch.float32),), Field(("action",), (), torch.int64)
    )
    buffers = BatchBuffers.allocate(layout, num_envs=2, num_steps=3)
    buffers.obs_ext[("observation",)].copy_(torch.arange(16.0).view(2, 4, 2))
    buffers.action.copy_(torch.tensor([[5, 6, 7], [8, 9, 10]]))
    buffers.done[0, 1] = True
    buffers.traj_ids.copy_(torch.tensor([[0, 0, 2], [1, 1, 1]]))
    batch = buffers.batch.clone()
    assert batch.names == [None, "time"]
    out = split_trajectories(batch)
    assert out.names == [None, "time"]
    assert set(out.keys(include_nested=True, leaves_only=True)) == set(
        batch.keys(include_nested=True, leaves_only=True)
    ) | {("collector", "mask")}
    assert out["observation"].tolist() == [
        [[0.0, 1.0], [2.0, 3.0], [0.0, 0.0]],
        [[4.0, 5.0], [0.0, 0.0], [0.0, 0.0]],
        [[8.0, 9.0], [10.0, 11.0], [12.0, 13.0]],
    ]
    assert out["action"].tolist() == [[5, 6, 0], [7, 0, 0], [8, 9, 10]]
    assert out["next", "done"][..., 0].tolist() == [[False, True, False], [False] * 3, [False] * 3]
    check_split(batch)


def test_split_of_a_masked_batch_keeps_only_real_frames() -> None:
    done = np.array([[False, True, False], [False, False, False]])
    ids = np.array([[0, 0, -1], [1, -1, -1]])  # as finish_batch leaves a batch stopped early
    batch = make_batch(done, ids)
    batch.set(("collector", "mask"), torch.tensor([[True, True, False], [True, False, False]]))
    out = split_trajectories(batch)
    assert out["collector", "traj_ids"][:, 0].tolist() == [0, 1]
    assert out["collector", "mask"].tolist() == [[True, True], [True, False]]
    assert out["x"].tolist() == [[0.0, 100.0], [300.0, 0.0]]


def test_split_of_a_heterogeneous_lazy_stack() -> None:
    """Agents whose entries differ in shape (a lazy stack): each trajectory's frames, zero padding."""
    from tensordict import LazyStackedTensorDict

    steps = 5
    agents = [TensorDict({"lidar": torch.arange(steps * size, dtype=torch.float32).view(steps, size) + 1},
                         [steps]) for size in (2, 3)]
    batch = TensorDict({"agents": LazyStackedTensorDict.lazy_stack(agents, dim=1),
                        ("collector", "traj_ids"): torch.tensor([4, 4, 9, 9, 9])}, [steps])
    out = split_trajectories(batch)
    assert out.batch_size == (2, 3)
    assert out["collector", "mask"].tolist() == [[True, True, False], [True, True, True]]
    for agent, size in enumerate((2, 3)):
        lidar = out["agents"].tensordicts[agent]["lidar"]
        frames = agents[agent]["lidar"]
        assert lidar.shape == (2, 3, size)
        assert torch.equal(lidar[0, :2], frames[:2]) and not lidar[0, 2].any()
        assert torch.equal(lidar[1], frames[2:])


# -- pad_trajectories -----------------------------------------------------------------------------


def trajectory(traj: int, length: int) -> TensorDict:
    t = torch.arange(length)
    return TensorDict(
        {
            "x": (10 * traj + t).float(),
            "obs": torch.stack([t, t + traj], -1).to(torch.uint8),
            ("next", "done"): (t == length - 1)[:, None],
            ("collector", "traj_ids"): torch.full((length,), traj),
        },
        batch_size=[length],
    )


def test_pad_trajectories() -> None:
    lengths = [3, 1, 4]
    out = pad_trajectories([trajectory(i, n) for i, n in enumerate(lengths)])
    assert out.batch_size == torch.Size([3, 4])
    assert out.names == [None, "time"]
    assert out["x"].tolist() == [[0.0, 1.0, 2.0, 0.0], [10.0, 0.0, 0.0, 0.0], [20.0, 21.0, 22.0, 23.0]]
    assert out["obs"].dtype == torch.uint8
    assert out["obs"].shape == (3, 4, 2)
    assert out["obs"][2].tolist() == [[0, 2], [1, 3], [2, 4], [3, 5]]
    assert out["obs"][1].tolist() == [[0, 1], [0, 0], [0, 0], [0, 0]]
    assert out["next", "done"][..., 0].tolist() == [
        [False, False, True, False],
        [True, False, False, False],
        [False, False, False, True],
    ]
    assert out["collector", "traj_ids"].tolist() == [[0, 0, 0, 0], [1, 0, 0, 0], [2, 2, 2, 2]]
    assert out["collector", "mask"].dtype == torch.bool
    assert out["collector", "mask"].tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [True, True, True, True],
    ]


def test_pad_replaces_a_mask_the_pieces_carried() -> None:
    pieces = [trajectory(0, 2), trajectory(1, 3)]
    for piece in pieces:
        piece.set(("collector", "mask"), torch.ones(len(piece), dtype=torch.bool))
    out = pad_trajectories(pieces)
    assert out["collector", "mask"].tolist() == [[True, True, False], [True, True, True]]


# -- TrajectoryAssembler ------------------------------------------------------------------------


def assembler_stream(
    seed: int, num_envs: int, num_batches: int, steps: int, masked: bool
) -> tuple[list[TensorDict], list[list[int]]]:
    """Batches cut from per-env frame streams, and the complete episodes (frame values) in the
    order they end: batch by batch, row by row, in time order."""
    rng = np.random.default_rng(seed)
    valid = (
        rng.integers(0, steps + 1, size=(num_batches, num_envs))
        if masked
        else np.full((num_batches, num_envs), steps)
    )
    # env n's frames: value 1000 * n + k, trajectory id 100 * n + episode
    episode = [0] * num_envs
    position = [0] * num_envs
    open_frames: list[list[int]] = [[] for _ in range(num_envs)]
    batches, complete = [], []
    for b in range(num_batches):
        value = np.full((num_envs, steps), -5, dtype=np.int64)  # masked frames: garbage
        ids = np.full((num_envs, steps), -1, dtype=np.int64)
        done = np.zeros((num_envs, steps), dtype=bool)
        for n in range(num_envs):
            for t in range(valid[b, n]):
                value[n, t] = 1000 * n + position[n]
                ids[n, t] = 100 * n + episode[n]
                done[n, t] = rng.random() < 0.3
                position[n] += 1
                open_frames[n].append(int(value[n, t]))
                if done[n, t]:
                    complete.append(open_frames[n])
                    open_frames[n] = []
                    episode[n] += 1
            if masked:  # garbage flags beyond the valid frames too
                done[n, valid[b, n] :] = rng.random(steps - valid[b, n]) < 0.5
        batch = TensorDict(
            {
                "value": torch.from_numpy(value),
                "pair": torch.from_numpy(np.stack([value, -value], -1)).float(),
                ("next", "done"): torch.from_numpy(done)[..., None],
                ("collector", "traj_ids"): torch.from_numpy(ids),
            },
            batch_size=[num_envs, steps],
        )
        if masked:
            batch.set(("collector", "mask"), torch.arange(steps)[None] < torch.from_numpy(valid[b])[:, None])
        batches.append(batch)
    return batches, complete


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_assembler_yields_the_complete_episodes_in_order(seed: int, masked: bool) -> None:
    batches, complete = assembler_stream(seed, num_envs=3, num_batches=5, steps=4, masked=masked)
    assembler = TrajectoryAssembler()
    got = []
    for batch in batches:
        assembler.add(batch.clone())
        while (trajectories := assembler.pop(1)) is not None:
            got.extend(trajectories)
    assert len(assembler) == 0
    assert [t["value"].tolist() for t in got] == complete
    for traj in got:
        assert traj.batch_size == torch.Size([len(traj)])
        assert traj["pair"].shape == (len(traj), 2)
        assert traj["pair"][:, 0].tolist() == traj["value"].float().tolist()
        assert len(set(traj["collector", "traj_ids"].tolist())) == 1
        done = traj["next", "done"][:, 0].tolist()
        assert done == [False] * (len(traj) - 1) + [True]
    assert complete, "the stream should hold complete episodes"


def test_assembler_pop_counts() -> None:
    def batch(ids: list[int], done: list[bool]) -> TensorDict:
        return TensorDict(
            {
                "x": torch.tensor([ids], dtype=torch.float32) * 10,
                ("collector", "traj_ids"): torch.tensor([ids]),
                ("next", "done"): torch.tensor([done])[..., None],
            },
            [1, len(ids)],
        )

    assembler = TrajectoryAssembler()
    assembler.add(batch([0, 0, 1, 1], [False, True, False, False]))
    assert len(assembler) == 1
    assert assembler.pop(2) is None
    assert len(assembler) == 1  # a refused pop takes nothing
    assembler.add(batch([1, 2, 2, 3], [True, False, True, True]))
    assert len(assembler) == 4
    popped = assembler.pop(3)
    assert popped is not None
    assert [t["collector", "traj_ids"].tolist() for t in popped] == [[0, 0], [1, 1, 1], [2, 2]]
    assert [t["x"].tolist() for t in popped] == [[0.0, 0.0], [10.0, 10.0, 10.0], [20.0, 20.0]]
    last = assembler.pop(1)
    assert last is not None
    assert [t["collector", "traj_ids"].tolist() for t in last] == [[3]]
    assert len(assembler) == 0
    assert assembler.pop(1) is None
    padded = pad_trajectories(popped)
    assert padded["x"].tolist() == [[0.0, 0.0, 0.0], [10.0, 10.0, 10.0], [20.0, 20.0, 0.0]]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_stream_ids_equal_a_step_by_step_count(data: st.DataObject) -> None:
    """Frames of any env in any order (an asynchronous pool's batches): each env keeps its id until
    its done, new ids come in frame order from the producer's stride, and restart() starts new ones."""
    num_envs = data.draw(st.integers(1, 4), label="num_envs")
    stride = data.draw(st.integers(1, 3), label="stride")
    offset = data.draw(st.integers(0, stride - 1), label="offset")
    batches = data.draw(st.lists(st.tuples(
        st.lists(st.tuples(st.integers(0, num_envs - 1), st.booleans()), max_size=8), st.booleans()),
        min_size=1, max_size=4), label="batches")
    ids = TrajectoryIds(num_envs, stride=stride, offset=offset)
    current, starting, counter = list(range(num_envs)), [False] * num_envs, num_envs
    for frames, restart in batches:
        envs = np.array([env for env, _ in frames], dtype=np.int64)
        done = np.array([d for _, d in frames], dtype=bool)
        out = np.full(len(frames), -7, dtype=np.int64)
        ids.assign_stream(envs, done, out)
        for k, (env, end) in enumerate(frames):
            if starting[env]:
                current[env], counter, starting[env] = counter, counter + 1, False
            assert out[k] == current[env] * stride + offset
            starting[env] = end
        if restart:
            ids.restart()
            starting = [True] * num_envs
