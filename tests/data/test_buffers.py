"""Batch buffers: the allocated keys, shapes and dtypes (the batch contract), views, shared memory, masks."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import BatchLayout, Field, action_fields, observation_fields

N, T = 3, 5


def leaf_layout() -> BatchLayout:
    return BatchLayout(
        (Field(("observation",), (4,), torch.float32),),
        Field(("action",), (2,), torch.float32),
    )


def dict_layout() -> BatchLayout:
    space = spaces.Dict(
        {
            "agent": spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "hp": spaces.Discrete(9)}),
            "image": spaces.Box(0, 255, (3, 3), np.uint8),
        }
    )
    return BatchLayout(
        tuple(observation_fields(space)),
        action_fields(spaces.Discrete(4))[0],
        (Field(("sample_log_prob",), (), torch.float32), Field(("aux", "hidden"), (6,), torch.float64)),
        dict_observations=True,
    )


Spec = dict[tuple[str, ...], tuple[tuple[int, ...], torch.dtype]]


def expected_contract(layout: BatchLayout, masked: bool) -> Spec:
    """Every leaf of the batch with its full shape and dtype, written out from the contract."""
    out: Spec = {}
    for f in layout.observations:
        out[f.key] = ((N, T, *f.shape), f.dtype)
        out[("next", *f.key)] = ((N, T, *f.shape), f.dtype)
    out[("action",)] = ((N, T, *layout.action.shape), layout.action.dtype)
    for f in layout.extras:
        out[f.key] = ((N, T, *f.shape), f.dtype)
    out[("next", "reward")] = ((N, T, 1), torch.float32)
    for flag in ("terminated", "truncated", "done"):
        out[("next", flag)] = ((N, T, 1), torch.bool)
    out[("collector", "traj_ids")] = ((N, T), torch.int64)
    out[("policy_version",)] = ((N, T), torch.int64)
    if masked:
        out[("collector", "mask")] = ((N, T), torch.bool)
    return out


def leaves(td: object) -> dict[tuple[str, ...], torch.Tensor]:
    return {
        (k,) if isinstance(k, str) else tuple(k): v
        for k, v in td.items(include_nested=True, leaves_only=True)  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("make_layout", [leaf_layout, dict_layout])
def test_allocate_follows_the_batch_contract(make_layout: object, masked: bool) -> None:
    layout = make_layout()  # type: ignore[operator]
    buffers = BatchBuffers.allocate(layout, N, T, masked=masked)
    assert buffers.batch.batch_size == torch.Size([N, T])
    assert buffers.batch.names == [None, "time"]
    assert (buffers.num_envs, buffers.num_steps) == (N, T)
    got = {key: (tuple(v.shape), v.dtype) for key, v in leaves(buffers.batch).items()}
    assert got == expected_contract(layout, masked)
    for key, tensor in leaves(buffers.batch).items():
        if key == ("collector", "mask"):
            assert bool(tensor.all()), "a fresh mask marks every frame real"
        else:
            assert not bool(tensor.any()), f"{key} is not zero-filled"


@pytest.mark.parametrize("make_layout", [leaf_layout, dict_layout])
def test_observation_slots_have_one_more_step(make_layout: object) -> None:
    layout = make_layout()  # type: ignore[operator]
    buffers = BatchBuffers.allocate(layout, N, T)
    assert set(buffers.obs_ext) == {f.key for f in layout.observations}
    for f in layout.observations:
        assert buffers.obs_ext[f.key].shape == (N, T + 1, *f.shape)
        assert buffers.obs_ext[f.key].dtype == f.dtype
        assert buffers.obs_ext_np[f.key].shape == (N, T + 1, *f.shape)
        assert buffers.next_obs[f.key].shape == (N, T, *f.shape)


def test_batch_observation_is_a_view_of_slots_0_to_T_minus_1() -> None:
    buffers = BatchBuffers.allocate(leaf_layout(), N, T)
    ext = buffers.obs_ext[("observation",)]
    ext.copy_(torch.arange(ext.numel(), dtype=torch.float32).view(ext.shape))
    torch.testing.assert_close(buffers.batch["observation"], ext[:, :T])
    # slot T (carried to the next batch) is not part of the batch
    assert buffers.batch["observation"].shape == (N, T, 4)
    assert buffers.batch["observation"].data_ptr() == ext.data_ptr()


def test_named_attributes_are_the_batch_tensors() -> None:
    buffers = BatchBuffers.allocate(dict_layout(), N, T, masked=True)
    batch = buffers.batch
    assert buffers.action is batch["action"]
    assert buffers.reward is batch["next", "reward"]
    assert buffers.terminated is batch["next", "terminated"]
    assert buffers.truncated is batch["next", "truncated"]
    assert buffers.done is batch["next", "done"]
    assert buffers.traj_ids is batch["collector", "traj_ids"]
    assert buffers.policy_version is batch["policy_version"]
    assert buffers.mask is batch["collector", "mask"]
    assert buffers.extras[("sample_log_prob",)] is batch["sample_log_prob"]
    assert buffers.extras[("aux", "hidden")] is batch["aux", "hidden"]
    assert buffers.next_obs[("agent", "pos")] is batch["next", "agent", "pos"]
    assert BatchBuffers.allocate(dict_layout(), N, T).mask is None


def test_numpy_views_share_memory_with_the_tensors() -> None:
    buffers = BatchBuffers.allocate(leaf_layout(), N, T)
    buffers.reward_np[1, 2, 0] = 2.5
    buffers.terminated_np[0, 4, 0] = True
    buffers.truncated_np[2, 0, 0] = True
    buffers.done_np[1, 1, 0] = True
    buffers.traj_ids_np[2, 3] = 42
    buffers.action_np[0, 1] = [0.5, -0.5]
    buffers.obs_ext_np[("observation",)][1, T] = [1, 2, 3, 4]
    buffers.next_obs_np[("observation",)][2, 0] = [5, 6, 7, 8]
    batch = buffers.batch
    assert batch["next", "reward"][1, 2, 0].item() == 2.5
    assert batch["next", "reward"].sum().item() == 2.5
    assert batch["next", "terminated"].nonzero().tolist() == [[0, 4, 0]]
    assert batch["next", "truncated"].nonzero().tolist() == [[2, 0, 0]]
    assert batch["next", "done"].nonzero().tolist() == [[1, 1, 0]]
    assert batch["collector", "traj_ids"][2, 3].item() == 42
    assert batch["action"][0, 1].tolist() == [0.5, -0.5]
    assert buffers.obs_ext[("observation",)][1, T].tolist() == [1, 2, 3, 4]
    assert batch["next", "observation"][2, 0].tolist() == [5, 6, 7, 8]


@pytest.mark.parametrize("masked", [False, True])
def test_shared_allocation_is_in_shared_memory(masked: bool) -> None:
    shared = BatchBuffers.allocate(dict_layout(), N, T, shared=True, masked=masked)
    for key, tensor in leaves(shared.storage).items():
        assert tensor.is_shared(), key
    for key, tensor in leaves(shared.batch).items():
        assert tensor.is_shared(), key
    private = BatchBuffers.allocate(dict_layout(), N, T)
    assert not any(t.is_shared() for t in leaves(private.storage).values())


def _child_writes(buffers: BatchBuffers) -> None:
    buffers.reward_np[1, 3, 0] = 7.0
    buffers.traj_ids_np[2, 4] = 99


def test_shared_buffers_see_a_forked_process_write() -> None:
    context = multiprocessing.get_context("fork")
    for shared, expected in ((True, (7.0, 99)), (False, (0.0, 0))):
        buffers = BatchBuffers.allocate(leaf_layout(), N, T, shared=shared)
        child = context.Process(target=_child_writes, args=(buffers,))
        child.start()
        child.join(timeout=30)
        assert child.exitcode == 0
        got = (buffers.reward[1, 3, 0].item(), buffers.traj_ids[2, 4].item())
        assert got == expected, f"shared={shared}"


def test_buffers_over_a_slice_of_storage_write_the_parent_rows() -> None:
    """What a worker does: wrap its rows of the parent's shared storage."""
    layout = leaf_layout()
    parent = BatchBuffers.allocate(layout, 4, T, shared=True, masked=True)
    rows = BatchBuffers(parent.storage[1:3], layout, T)
    assert rows.num_envs == 2
    assert rows.batch.batch_size == torch.Size([2, T])
    rows.write_obs_all(0, np.full((2, 4), 3.0, dtype=np.float32))
    rows.reward_np[:, :, 0] = 1.5
    rows.mask[1, 2:] = False  # type: ignore[index]
    expected_obs = torch.zeros(4, 4)
    expected_obs[1:3] = 3.0
    torch.testing.assert_close(parent.batch["observation"][:, 0], expected_obs)
    assert parent.reward[:, :, 0].tolist() == [[0.0] * T, [1.5] * T, [1.5] * T, [0.0] * T]
    expected_mask = torch.ones(4, T, dtype=torch.bool)
    expected_mask[2, 2:] = False
    assert torch.equal(parent.batch["collector", "mask"], expected_mask)


def test_write_obs_leaf() -> None:
    buffers = BatchBuffers.allocate(leaf_layout(), N, T)
    buffers.write_obs(2, 3, np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32))
    expected = torch.zeros(N, T + 1, 4)
    expected[2, 3] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    torch.testing.assert_close(buffers.obs_ext[("observation",)], expected)
    batched = np.arange(N * 4, dtype=np.float32).reshape(N, 4)
    buffers.write_obs_all(T, batched)
    torch.testing.assert_close(buffers.obs_ext[("observation",)][:, T], torch.from_numpy(batched))
    buffers.write_final_obs(1, 4, np.array([9.0, 8.0, 7.0, 6.0], dtype=np.float32))
    expected_next = torch.zeros(N, T, 4)
    expected_next[1, 4] = torch.tensor([9.0, 8.0, 7.0, 6.0])
    torch.testing.assert_close(buffers.batch["next", "observation"], expected_next)


def test_write_obs_dict() -> None:
    buffers = BatchBuffers.allocate(dict_layout(), N, T)
    obs = {
        "agent": {"pos": np.array([0.25, -0.5], dtype=np.float32), "hp": 7},
        "image": np.full((3, 3), 200, dtype=np.uint8),
    }
    buffers.write_obs(1, 2, obs)
    assert buffers.obs_ext[("agent", "pos")][1, 2].tolist() == [0.25, -0.5]
    assert buffers.obs_ext[("agent", "hp")][1, 2].item() == 7
    assert buffers.obs_ext[("image",)][1, 2].tolist() == [[200] * 3] * 3
    # nothing else was written
    assert buffers.obs_ext[("agent", "hp")].sum().item() == 7
    assert buffers.obs_ext[("image",)].sum().item() == 9 * 200
    # the batch sees it at the same frame
    assert buffers.batch["agent", "hp"][1, 2].item() == 7

    batched = {
        "agent": {"pos": np.ones((N, 2), dtype=np.float32), "hp": np.array([1, 2, 3])},
        "image": np.zeros((N, 3, 3), dtype=np.uint8),
    }
    buffers.write_obs_all(T, batched)
    assert buffers.obs_ext[("agent", "hp")][:, T].tolist() == [1, 2, 3]
    assert buffers.obs_ext[("agent", "pos")][:, T].tolist() == [[1.0, 1.0]] * N

    final = {"agent": {"pos": np.array([9.0, 9.0], dtype=np.float32), "hp": 0}, "image": obs["image"]}
    buffers.write_final_obs(0, 1, final)
    assert buffers.batch["next", "agent", "pos"][0, 1].tolist() == [9.0, 9.0]
    assert buffers.batch["next", "image"][0, 1].tolist() == [[200] * 3] * 3
    assert buffers.batch["next", "agent", "pos"].abs().sum().item() == 18.0


def test_finals_start_empty() -> None:
    buffers = BatchBuffers.allocate(leaf_layout(), N, T)
    assert buffers.finals == []
