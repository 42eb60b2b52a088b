"""Gymnasium's default vector envs (``NEXT_STEP`` autoreset, ``reset()`` resets every sub-env):
only real transitions, equal to a plain loop written here that skips each sub-env's reset step.

The reference steps ``gym.make_vec("CartPole-v1", num_envs=N)`` with a deterministic policy and
keeps, per sub-env, the transitions whose step was not that sub-env's reset. The collectors' rows
(each sub-env's frames where ``("collector", "mask")`` is set, batch after batch) must equal them
value for value; every kept transition must follow CartPole's physics from its observation and
action, and the masked frames are exactly those that do not.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv, CartPoleVectorEnv
from gymnasium.vector import AutoresetMode
from tensordict import TensorDictBase

from rlcollect import Collector, MultiAsyncCollector, MultiSyncCollector, ReplayBuffer, split_trajectories
from tests.policies.test_recurrent import HIDDEN, GRUPolicy

pytestmark = pytest.mark.timeout(120)

N, T, SEED, LIMIT = 6, 40, 3, 30


def make_default() -> Any:
    """What Gymnasium builds when no mode is given: ``CartPoleVectorEnv``, ``NEXT_STEP``."""
    return gym.make_vec("CartPole-v1", num_envs=N, max_episode_steps=LIMIT)


def angle_policy(obs: Any) -> Any:
    """Push towards the side the pole leans to: episodes both end (terminated) and reach LIMIT."""
    return (obs[:, 2] > 0).long() if isinstance(obs, torch.Tensor) else (obs[:, 2] > 0).astype(np.int64)


def reference(steps: int) -> tuple[list[dict[str, np.ndarray]], list[tuple[float, int]]]:
    """Per sub-env, its real transitions over ``steps`` vector steps; the episodes (return, length)."""
    env = make_default()
    obs, _ = env.reset(seed=SEED)
    resetting = np.zeros(N, dtype=bool)
    rows: list[dict[str, list[Any]]] = [{k: [] for k in ("obs", "action", "reward", "next", "term", "trunc")}
                                        for _ in range(N)]
    running, episodes = np.zeros(N), []
    length = np.zeros(N, dtype=np.int64)
    for _ in range(steps):
        action = angle_policy(obs)
        next_obs, reward, term, trunc, _ = env.step(action)
        for i in range(N):
            if resetting[i]:  # this step reset sub-env i: not a transition
                continue
            values = (obs[i], action[i], reward[i], next_obs[i], term[i], trunc[i])
            for key, value in zip(("obs", "action", "reward", "next", "term", "trunc"), values, strict=True):
                rows[i][key].append(np.copy(value))
            running[i] += reward[i]
            length[i] += 1
            if term[i] or trunc[i]:
                episodes.append((float(running[i]), int(length[i])))
                running[i], length[i] = 0.0, 0
        resetting = (term | trunc) & ~resetting
        obs = next_obs
    env.close()
    return [{k: np.stack(v) for k, v in row.items()} for row in rows], episodes


def per_env(batches: list[TensorDictBase]) -> list[dict[str, np.ndarray]]:
    """Each row's masked-in frames, batch after batch, in the reference's keys."""
    batch = torch.cat(batches, 1)
    mask = batch["collector", "mask"]
    keys = {"obs": "observation", "action": "action", "reward": ("next", "reward"),
            "next": ("next", "observation"), "term": ("next", "terminated"), "trunc": ("next", "truncated")}
    out = []
    for i in range(batch.shape[0]):
        row = {}
        for name, key in keys.items():
            value = batch[key][i][mask[i]].numpy()
            row[name] = value[:, 0] if name in ("reward", "term", "trunc") else value
        out.append(row)
    return out


def follows_physics(obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
    """Whether each ``next_obs`` is CartPole's step from ``obs`` with ``action``."""
    env = CartPoleEnv()
    env.reset(seed=0)
    ok = []
    with warnings.catch_warnings():  # stepping on from a terminal state: what is checked here
        warnings.simplefilter("ignore")
        for o, a, n in zip(obs, action, next_obs, strict=True):
            env.state = o.astype(np.float64)
            stepped = env.step(int(a))[0]
            ok.append(np.allclose(stepped, n, atol=1e-5))
    return np.array(ok)


def collect(collector: Any) -> list[TensorDictBase]:
    with collector:
        return [batch.clone() for batch in collector]


def test_default_vector_env_gives_the_reference_transitions() -> None:
    collector = Collector(make_default, angle_policy, frames_per_batch=N * T, total_frames=N * T * 4,
                          seed=SEED)
    batches = collect(collector)
    steps = sum(b.shape[1] for b in batches)
    expected, episodes = reference(steps)
    got = per_env(batches)
    for i in range(N):
        assert got[i].keys() == expected[i].keys()
        for key in expected[i]:
            wanted = expected[i][key].astype(got[i][key].dtype)
            np.testing.assert_array_equal(got[i][key], wanted, err_msg=key)
    batch = torch.cat(batches, 1)
    mask = batch["collector", "mask"]
    holes = ~mask
    assert holes.any() and batch["next", "terminated"].any() and batch["next", "truncated"][mask].any()
    traj_ids = batch["collector", "traj_ids"]
    assert (traj_ids[holes] == -1).all() and (traj_ids[mask] >= 0).all()
    assert not batch["next", "done"][holes].any()
    stats = collector.stats()
    assert stats.frames == int(mask.sum()) < batch.numel()
    assert stats.episodes == len(episodes)
    assert stats.mean_length == pytest.approx(np.mean([length for _, length in episodes]))
    assert stats.mean_return == pytest.approx(np.mean([ret for ret, _ in episodes]))


def test_every_kept_transition_follows_from_its_observation_and_action() -> None:
    batch = torch.cat(collect(Collector(make_default, angle_policy, frames_per_batch=N * T,
                                        total_frames=N * T * 3, seed=SEED)), 1).reshape(-1)
    mask = batch["collector", "mask"]
    real = follows_physics(batch["observation"].numpy(), batch["action"].numpy(),
                           batch["next", "observation"].numpy())
    np.testing.assert_array_equal(real, mask.numpy())  # the masked frames are the reset steps, and only they


def test_a_replay_buffer_and_split_trajectories_keep_only_transitions() -> None:
    buffer = ReplayBuffer(10_000)
    with Collector(make_default, angle_policy, frames_per_batch=N * T, total_frames=N * T * 2, seed=SEED,
                   replay_buffer=buffer) as collector:
        for _ in collector:
            pass
        stats = collector.stats()
        assert len(buffer) == stats.frames < stats.batches * N * T
    stored = buffer.data[: len(buffer)]
    assert len(buffer) > 0
    assert follows_physics(stored["observation"].numpy(), stored["action"].numpy(),
                           stored["next", "observation"].numpy()).all()
    with Collector(make_default, angle_policy, frames_per_batch=N * T, seed=SEED) as collector:
        batch = next(iter(collector))
    trajectories = split_trajectories(batch)
    real = trajectories["collector", "mask"]
    assert int(real.sum()) == int(batch["collector", "mask"].sum())
    assert follows_physics(trajectories["observation"][real].numpy(), trajectories["action"][real].numpy(),
                           trajectories["next", "observation"][real].numpy()).all()


@pytest.mark.parametrize("kind", [MultiSyncCollector, MultiAsyncCollector])
def test_worker_collectors_count_and_mask_the_same_way(kind: Any) -> None:
    collector = kind([make_default, make_default], angle_policy, frames_per_batch=2 * N * 20,
                     total_frames=2 * N * 60, seed=SEED)
    batches = collect(collector)
    mask = torch.cat([b["collector", "mask"].reshape(-1) for b in batches])
    flat = torch.cat([b.reshape(-1) for b in batches])
    assert (~mask).any()
    assert collector.stats().frames == int(mask.sum())
    np.testing.assert_array_equal(follows_physics(flat["observation"].numpy(), flat["action"].numpy(),
                                                  flat["next", "observation"].numpy()), mask.numpy())


def test_a_resumed_collector_goes_on_from_a_pending_reset() -> None:
    with Collector(make_default, angle_policy, frames_per_batch=N * 25, seed=SEED) as first:
        batches = iter(first)
        next(batches)
        state = first.state_dict()
        expected = [next(batches).clone() for _ in range(3)]
    with Collector(make_default, angle_policy, frames_per_batch=N * 25, seed=SEED + 1) as second:
        second.load_state_dict(state)
        got = [batch.clone() for _, batch in zip(range(3), second, strict=False)]
    assert any((~b["collector", "mask"]).any() for b in expected)
    for ours, theirs in zip(got, expected, strict=True):
        assert (ours == theirs).all()


def test_a_recurrent_policy_starts_each_episode_after_the_reset_step() -> None:
    """``is_init`` is set on the frame after a reset step (not on the reset step's successor in
    time only), and the state the policy carries is zeros there, as in a loop written here."""
    with Collector(make_default, GRUPolicy(), frames_per_batch=N * T, seed=SEED) as collector:
        batch = next(iter(collector))
    policy = GRUPolicy()
    env = make_default()
    obs, _ = env.reset(seed=SEED)
    starts, resetting, h = np.ones(N, dtype=bool), np.zeros(N, dtype=bool), torch.zeros(N, HIDDEN)
    is_init, actions = [], []
    with torch.inference_mode():
        for _ in range(T):
            h = policy.step(torch.as_tensor(obs), h, torch.as_tensor(starts)[:, None])
            action = (h[:, 0] > 0).long().numpy()
            is_init.append(starts.copy())
            actions.append(action)
            obs, _, term, trunc, _ = env.step(action)
            ended = (term | trunc) & ~resetting
            starts, resetting = ended | resetting, ended
    mask = batch["collector", "mask"].numpy()
    assert (~mask).any()
    np.testing.assert_array_equal(batch["is_init"][..., 0].numpy()[mask], np.stack(is_init, 1)[mask])
    np.testing.assert_array_equal(batch["action"].numpy()[mask], np.stack(actions, 1)[mask])


def test_what_cannot_be_done_with_such_an_env_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"max_frames_per_traj=10 .*NEXT_STEP.*max_episode_steps=10"):
        Collector(make_default, frames_per_batch=N * 4, max_frames_per_traj=10)

    class Disabled(CartPoleVectorEnv):
        metadata = {**CartPoleVectorEnv.metadata, "autoreset_mode": AutoresetMode.DISABLED}

    listed = r"autoreset_mode Disabled but ignores reset_mask.*sub-envs \[1, 2, 3, 4, 5\] and 1018 more"
    with pytest.raises(ValueError, match=listed):
        Collector(Disabled(num_envs=1024), frames_per_batch=1024)


def test_whole_trajectories_leave_the_reset_steps_out() -> None:
    """``trajs_per_batch``: each trajectory's frames follow one another (a frame's next
    observation is the next frame's observation), start from a reset observation, follow CartPole's
    physics, and no reset step is among them."""
    with Collector(make_default, angle_policy, frames_per_batch=N * T, trajs_per_batch=6, traj_format="cat",
                   seed=SEED) as collector:
        batches = [next(iter(collector)).clone() for _ in range(3)]
    for batch in batches:
        ids = batch["collector", "traj_ids"]
        assert (ids >= 0).all()
        obs, nxt = batch["observation"], batch["next", "observation"]
        assert follows_physics(obs.numpy(), batch["action"].numpy(), nxt.numpy()).all()
        same = ids[1:] == ids[:-1]
        torch.testing.assert_close(obs[1:][same], nxt[:-1][same], rtol=0, atol=0)
        starts = torch.ones_like(ids, dtype=torch.bool)
        starts[1:] = ~same
        assert (obs[starts].abs() <= 0.05).all()  # CartPole's reset observations


def test_episodes_exported_from_a_run_start_after_the_reset_step() -> None:
    from rlcollect.cli.export import run_episodes

    batches = collect(Collector(make_default, angle_policy, frames_per_batch=N * T, total_frames=N * T * 3,
                                seed=SEED))
    episodes = list(run_episodes(torch.stack(batches), [("observation",)]))
    _, expected = reference(sum(b.shape[1] for b in batches))
    assert len(episodes) == len(expected) > 0
    for episode in episodes:
        obs, actions = episode["observations"], episode["actions"]
        assert (np.abs(obs[0]) <= 0.05).all()  # a reset observation, not the episode before's last
        assert follows_physics(obs[:-1], actions, obs[1:]).all()
        assert (episode["rewards"] == 1).all() and episode["terminations"][-1] | episode["truncations"][-1]
