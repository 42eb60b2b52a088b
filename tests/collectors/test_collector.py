"""The single-process Collector's features, each checked against what it must produce."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from tensordict.nn.probabilistic import interaction_type

from rlcollect import Collector, split_trajectories
from tests.envs_for_tests import PendulumPolicy, TiltPolicy, make_cartpole, make_pendulum


class ConstantPolicy(torch.nn.Module):
    """Action = 1 if the bias is positive else 0: the weights decide every action."""

    def __init__(self, bias: float) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor(bias))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (self.bias > 0).long().expand(obs.shape[0])


def batches(collector: Collector, count: int) -> list[TensorDictBase]:
    out = [collector.next() for _ in range(count)]
    assert all(b is not None for b in out)
    return out  # type: ignore[return-value]


def assert_same(a: TensorDictBase, b: TensorDictBase) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key


def test_batch_layout_dtypes_and_shapes() -> None:
    collector = Collector(make_pendulum, PendulumPolicy(), frames_per_batch=30, num_envs=3, seed=0)
    batch = collector.next()
    assert batch is not None
    assert batch.batch_size == (3, 10) and batch.names == [None, "time"]
    expected = {
        "observation": ((3, 10, 3), torch.float32),
        "action": ((3, 10, 1), torch.float32),
        ("next", "observation"): ((3, 10, 3), torch.float32),
        ("next", "reward"): ((3, 10, 1), torch.float32),
        ("next", "terminated"): ((3, 10, 1), torch.bool),
        ("next", "truncated"): ((3, 10, 1), torch.bool),
        ("next", "done"): ((3, 10, 1), torch.bool),
        ("collector", "traj_ids"): ((3, 10), torch.int64),
        "policy_version": ((3, 10), torch.int64),
    }
    assert set(batch.keys(True, True)) == set(expected)
    for key, (shape, dtype) in expected.items():
        assert batch[key].shape == shape and batch[key].dtype == dtype, key
    # the next observation of a frame is the observation of the following frame (no episode end)
    assert torch.equal(batch["next", "observation"][:, :-1], batch["observation"][:, 1:])


def test_same_seed_gives_identical_batches() -> None:
    runs = [batches(Collector(make_cartpole, None, frames_per_batch=40, num_envs=2, seed=3), 4)
            for _ in range(2)]
    for a, b in zip(*runs, strict=True):
        assert_same(a, b)
    other = batches(Collector(make_cartpole, None, frames_per_batch=40, num_envs=2, seed=4), 1)
    assert not torch.equal(other[0]["observation"], runs[0][0]["observation"])


def test_set_seed_equals_constructor_seed_and_returns_next_seed() -> None:
    a = Collector(make_cartpole, None, frames_per_batch=20, num_envs=2, seed=11)
    b = Collector(make_cartpole, None, frames_per_batch=20, num_envs=2)
    assert b.set_seed(11) == 13
    for x, y in zip(batches(a, 2), batches(b, 2), strict=True):
        assert_same(x, y)


@pytest.mark.parametrize("policy", [None, TiltPolicy()])
def test_state_dict_resume_continues_the_same_frames(policy: Any) -> None:
    reference = Collector(make_cartpole, policy, frames_per_batch=30, num_envs=2, seed=5)
    first = batches(reference, 2)
    state = reference.state_dict()
    expected = batches(reference, 3)
    del first
    resumed = Collector(make_cartpole, policy, frames_per_batch=30, num_envs=2, seed=999)
    resumed.load_state_dict(state)
    for want, got in zip(expected, batches(resumed, 3), strict=True):
        assert_same(want, got)
    assert resumed.stats().frames == reference.stats().frames == 150


def test_update_policy_weights_changes_actions_and_stamps_version() -> None:
    policy = ConstantPolicy(1.0)
    collector = Collector("CartPole-v1", policy, frames_per_batch=8, num_envs=2)
    first = collector.next()
    assert first is not None
    assert (first["action"] == 1).all() and (first["policy_version"] == 0).all()
    collector.update_policy_weights_(weights={"bias": torch.tensor(-1.0)})
    second = collector.next()
    assert second is not None
    assert (second["action"] == 0).all() and (second["policy_version"] == 1).all()
    collector.update_policy_weights_(ConstantPolicy(2.0))
    collector.update_policy_weights_(policy=ConstantPolicy(2.0), model_id="policy")
    collector.update_policy_weights_(weights_dict={"policy": TensorDict({"bias": torch.tensor(3.0)})})
    third = collector.next()
    assert third is not None
    assert (third["action"] == 1).all() and (third["policy_version"] == 4).all()
    assert collector.stats().policy_version == 4


@pytest.mark.parametrize("device", ["cpu:0", torch.device("cpu", 0), "cpu"])
def test_a_cpu_device_by_any_name_runs_the_module_itself(device: Any) -> None:
    """'cpu:0' names the device every CPU tensor is on: no copy is made (a copy would not follow
    the training of the module you hold)."""
    policy = ConstantPolicy(1.0)
    with Collector("CartPole-v1", policy, frames_per_batch=4, policy_device=device,
                   device=device) as collector:
        assert collector.policy is policy
        assert collector.options.policy_device == torch.device("cpu") == collector.options.storing_device


def test_user_module_is_used_in_place_on_its_device() -> None:
    policy = ConstantPolicy(1.0)
    collector = Collector("CartPole-v1", policy, frames_per_batch=4, policy_device="cpu")
    assert collector.policy is policy
    with torch.no_grad():
        policy.bias.fill_(-1.0)  # training in place is seen at once, as with TorchRL
    collector.update_policy_weights_()
    batch = collector.next()
    assert batch is not None and (batch["action"] == 0).all() and (batch["policy_version"] == 1).all()


def test_tensordict_policy_extras_land_in_the_batch() -> None:
    def act(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (obs[..., 2] > 0).long(), obs.sum(-1, keepdim=True), -obs[..., :1].abs()

    policy = TensorDictModule(act, in_keys=["observation"],
                              out_keys=["action", "state_value", "sample_log_prob"])
    batch = Collector("CartPole-v1", policy, frames_per_batch=12, num_envs=3, seed=0).next()
    assert batch is not None
    assert batch["state_value"].shape == (3, 4, 1) and batch["sample_log_prob"].shape == (3, 4, 1)
    assert torch.allclose(batch["state_value"], batch["observation"].sum(-1, keepdim=True))
    assert torch.equal(batch["action"], (batch["observation"][..., 2] > 0).long())


@pytest.mark.parametrize("exploration,expected", [("random", 1), ("deterministic", 0), ("mode", 0)])
def test_exploration_type_reaches_the_policy(exploration: str, expected: int) -> None:
    def act(obs: torch.Tensor) -> torch.Tensor:
        return torch.full(obs.shape[:1], int(interaction_type().value == "random"))

    policy = TensorDictModule(act, in_keys=["observation"], out_keys=["action"])
    batch = Collector("CartPole-v1", policy, frames_per_batch=5, exploration_type=exploration).next()
    assert batch is not None and (batch["action"] == expected).all()


def test_init_random_frames_uses_random_actions_first() -> None:
    collector = Collector("CartPole-v1", ConstantPolicy(-1.0), frames_per_batch=50,
                          init_random_frames=100, seed=0)
    random_1, random_2, policy_1 = batches(collector, 3)
    assert random_1["action"].sum() > 0 and random_2["action"].sum() > 0
    assert (policy_1["action"] == 0).all()


def test_set_truncated_ends_each_batch_for_the_learner_and_the_episode_goes_on() -> None:
    """The last frame is marked truncated (and done); the env is not reset, so its episode goes on
    in the next batch under the same trajectory id, as in TorchRL, and ``episodes()`` counts
    it once, with that id (it used to give the rest of the episode a new id)."""
    collector = Collector("CartPole-v1", None, frames_per_batch=20, num_envs=2, seed=0,
                          set_truncated=True)  # no time limit within 60 steps: the env only terminates
    run = [batch.clone() for batch in batches(collector, 6)]
    first, second = run[0], run[1]
    last = first[:, -1]
    assert last["next", "done"].all()
    assert torch.equal(last["next", "truncated"], ~last["next", "terminated"])
    ended = first["next", "terminated"][:, -1, 0]
    went_on = second["collector", "traj_ids"][:, 0] == first["collector", "traj_ids"][:, -1]
    assert torch.equal(went_on, ~ended)
    # the env is not reset: the next batch continues from the last observation
    assert torch.equal(second["observation"][~ended, 0], first["next", "observation"][~ended, -1])
    frames = torch.cat(run, dim=1)  # [envs, 60]: each episode's frames under one id, ids by ends only
    ids, terminated = frames["collector", "traj_ids"], frames["next", "terminated"][..., 0]
    assert torch.equal(ids[:, 1:] != ids[:, :-1], terminated[:, :-1])
    episodes = collector.episodes()
    assert len(episodes) == int(terminated.sum())
    for traj_id, length in zip(episodes["traj_id"].tolist(), episodes["length"].tolist(), strict=True):
        assert int((ids == traj_id).sum()) == length


def test_reset_at_each_iter_resets_envs_and_marks_the_cut() -> None:
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=10, seed=0,
                          reset_at_each_iter=True)
    first, second = batches(collector, 2)
    assert first["next", "done"][:, -1].all()
    assert not torch.equal(second["observation"][:, 0], first["next", "observation"][:, -1])
    assert (second["collector", "traj_ids"] != first["collector", "traj_ids"][:, -1:]).all()


def test_split_trajs_regroups_by_trajectory() -> None:
    reference = Collector(make_cartpole, TiltPolicy(), frames_per_batch=60, seed=1).next()
    split = Collector(make_cartpole, TiltPolicy(), frames_per_batch=60, seed=1, split_trajs=True).next()
    assert reference is not None and split is not None
    assert (split == split_trajectories(reference)).all()
    mask = split["collector", "mask"]
    assert int(mask.sum()) == 60
    for row in range(split.shape[0]):
        ids = split["collector", "traj_ids"][row][mask[row]]
        assert (ids == ids[0]).all()
        done = split["next", "done"][row][mask[row]][..., 0]
        assert not done[:-1].any()  # only the last frame of a trajectory may be done
    assert torch.equal(split["observation"][mask], reference["observation"][0])


def test_hooks_and_postproc_run_in_order() -> None:
    calls: list[str] = []

    def postproc(batch: TensorDictBase) -> TensorDictBase:
        calls.append("postproc")
        return batch.set("marker", torch.ones(batch.shape))

    def post(batch: TensorDictBase) -> None:
        calls.append("post")
        assert "marker" in batch

    collector = Collector("CartPole-v1", None, frames_per_batch=4, total_frames=8, postproc=postproc,
                          pre_collect_hook=lambda: calls.append("pre"), post_collect_hook=post)
    assert len(list(collector)) == 2
    assert calls == ["pre", "postproc", "post"] * 2


def test_return_same_td_and_clones() -> None:
    same = Collector("CartPole-v1", None, frames_per_batch=4, total_frames=12, return_same_td=True)
    outputs = list(same)
    assert outputs[0] is outputs[1] is outputs[2]
    cloned = list(Collector("CartPole-v1", None, frames_per_batch=4, total_frames=12, seed=0))
    assert cloned[0] is not cloned[1]
    assert not torch.equal(cloned[0]["observation"], cloned[1]["observation"])


def test_compile_policy_keeps_the_actions() -> None:
    plain = Collector(make_cartpole, TiltPolicy(), frames_per_batch=20, seed=2).next()
    compiled = Collector(make_cartpole, TiltPolicy(), frames_per_batch=20, seed=2,
                         compile_policy={"backend": "eager"}).next()
    assert plain is not None and compiled is not None
    assert torch.equal(plain["action"], compiled["action"])


def test_stats_count_frames_and_episodes() -> None:
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=50, total_frames=200, seed=0)
    data = torch.cat(list(collector), dim=1)  # type: ignore[arg-type]
    stats = collector.stats()
    done = data["next", "done"][0, :, 0]
    ends = torch.nonzero(done)[:, 0].tolist()
    lengths = np.diff([-1, *ends])
    assert stats.frames == 200 and stats.batches == 4 and stats.fps > 0
    assert stats.episodes == len(ends)
    assert stats.mean_length == pytest.approx(lengths.mean())
    assert stats.mean_return == pytest.approx(lengths.mean())  # CartPole: reward 1 per step


def test_len_next_and_shutdown() -> None:
    with pytest.warns(UserWarning, match=r"total_frames=25 .* 30 frames \(3 batches\)"):
        collector = Collector("CartPole-v1", None, frames_per_batch=10, total_frames=25)
    assert len(collector) == 3
    assert [collector.next() is not None for _ in range(4)] == [True, True, True, False]
    collector.shutdown()
    collector.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="shut down"):
        collector.rollout()
    with pytest.raises(RuntimeError, match="never ends and has no length"):
        len(Collector("CartPole-v1", None, frames_per_batch=10))


def test_context_manager_closes_envs() -> None:
    with Collector("CartPole-v1", None, frames_per_batch=4, total_frames=4) as collector:
        assert len(list(collector)) == 1
    assert collector._closed


def test_reset_starts_new_trajectories() -> None:
    collector = Collector(make_cartpole, TiltPolicy(), frames_per_batch=5, seed=0)
    first = collector.next()
    collector.reset()
    second = collector.next()
    assert first is not None and second is not None
    assert second["collector", "traj_ids"][0, 0] > first["collector", "traj_ids"][0, -1]


def test_enable_profile_writes_a_chrome_trace(tmp_path: Path) -> None:
    collector = Collector("CartPole-v1", TiltPolicy(), frames_per_batch=20, total_frames=100)
    collector.enable_profile(num_rollouts=3, warmup_rollouts=1,
                             save_path=tmp_path / "trace_{worker_idx}.json", with_stack=False)
    assert collector.profile_config is not None and collector.profile_config.num_rollouts == 3
    list(collector)
    trace = json.loads((tmp_path / "trace_0.json").read_text())
    assert trace["traceEvents"]
    with pytest.raises(RuntimeError, match="Cannot enable profiling after iteration started: .* before"):
        collector.enable_profile()


def test_disable_profile_stops_the_profiler(tmp_path: Path) -> None:
    """disable_profile() before the first batch: nothing is profiled; during profiling: the
    profiler stops at once, writing what it recorded, and the later batches are not profiled."""
    for batches_before in (0, 1):
        path = tmp_path / f"{batches_before}" / "trace_{worker_idx}.json"
        with Collector("CartPole-v1", TiltPolicy(), frames_per_batch=20, total_frames=100) as collector:
            collector.enable_profile(num_rollouts=3, warmup_rollouts=1, save_path=path, with_stack=False)
            for _ in range(batches_before):
                collector.next()
            collector.disable_profile()
            assert collector.profile_config is None
            list(collector)
            assert not torch.autograd.profiler._is_profiler_enabled
        assert (tmp_path / f"{batches_before}" / "trace_0.json").exists() == (batches_before == 1)
    collector.disable_profile()  # never enabled, or already disabled: nothing happens
