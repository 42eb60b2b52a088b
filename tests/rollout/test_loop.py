"""collect_batch over a scripted EnvBatch: every key of the batch contract against a plain replay."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModule
from tensordict.nn.probabilistic import interaction_type as current_interaction_type

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import BatchLayout, action_fields, observation_fields
from rlcollect.data.trajectories import TrajectoryIds
from rlcollect.envs.base import EnvBatch
from rlcollect.policies import PolicyAdapter, make_policy
from rlcollect.rollout.config import RolloutConfig
from rlcollect.rollout.episodes import EpisodeTracker
from rlcollect.rollout.loop import begin_batch, collect_batch, finish_batch

N, T = 3, 5

# how env n's k-th step (counted over the whole run) ends its episode
ENDS: dict[tuple[int, int], str] = {
    (0, 0): "terminated",  # the very first step
    (0, 4): "truncated",  # the last frame of batch 0
    (0, 5): "terminated",  # the first frame of batch 1, right after an end
    (1, 2): "both",
    (1, 9): "terminated",  # the last frame of batch 1
    (2, 6): "truncated",
    (2, 7): "terminated",
    (2, 8): "truncated",
    (1, 12): "truncated",
}


class CounterEnvs(EnvBatch):
    """Env n observes ``[n, episode, step in episode, steps taken]``.

    A reset observation has step 0 and a final one step > 0, so a final observation replaced by
    the reset one shows. Rewards are ``10 * k + n`` at the env's k-th step. With ``dict_obs`` the
    observation is ``{"count": [episode, step, taken], "meta": {"env": n}}``. ``stop_after``
    raises ``stop[0]`` once that many steps were taken (another process preempting).
    """

    def __init__(self, num_envs: int, ends: dict[tuple[int, int], str], dict_obs: bool = False) -> None:
        super().__init__(num_envs, None)
        self.ends = ends
        self.dict_obs = dict_obs
        if dict_obs:
            self.observation_space = spaces.Dict(
                {
                    "count": spaces.Box(0.0, 1e6, (3,), np.float32),
                    "meta": spaces.Dict({"env": spaces.Discrete(num_envs)}),
                }
            )
        else:
            self.observation_space = spaces.Box(0.0, 1e6, (4,), np.float32)
        self.action_space = spaces.Discrete(100_000)
        self.episode = [0] * num_envs
        self.step_in_episode = [0] * num_envs
        self.taken = 0
        self.received: list[list[int]] = []  # actions each step was called with
        self.stop: np.ndarray | None = None
        self.stop_after: int | None = None

    def observe(self, n: int) -> Any:
        flat = [n, self.episode[n], self.step_in_episode[n], self.taken]
        if self.dict_obs:
            return {"count": np.array(flat[1:], dtype=np.float32), "meta": {"env": n}}
        return np.array(flat, dtype=np.float32)

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        assert self._buffers is not None
        for n in range(self.num_envs):
            self.step_in_episode[n] = 0
            self._buffers.write_obs(n, slot, self.observe(n))

    def step(self, t: int) -> None:
        buffers = self._buffers
        assert buffers is not None
        self.received.append(buffers.action_np[:, t].tolist())
        k = self.taken
        self.taken += 1
        for n in range(self.num_envs):
            self.step_in_episode[n] += 1
            buffers.reward_np[n, t, 0] = 10 * k + n
            obs = self.observe(n)
            end = self.ends.get((n, k))
            if end is not None:
                buffers.terminated_np[n, t, 0] = end in ("terminated", "both")
                buffers.truncated_np[n, t, 0] = end in ("truncated", "both")
                buffers.finals.append((n, t, obs))
                self.episode[n] += 1
                self.step_in_episode[n] = 0
                obs = self.observe(n)
            buffers.write_obs(n, t + 1, obs)
        if self.stop is not None and self.taken == self.stop_after:
            self.stop[0] = True

    def seed_action_spaces(self, seeds: list[int]) -> None:
        pass

    def close(self) -> None:
        pass

    def _state_objects(self) -> Any:
        return self


def script(num_envs: int, total: int, ends: dict[tuple[int, int], str]) -> dict[str, np.ndarray]:
    """The run written out step by step: ``obs[:, k]`` is what the policy sees at step k (reset
    observations after an end), ``next[:, k]`` what step k returned (the final one at an end)."""
    obs = np.zeros((num_envs, total + 1, 4), dtype=np.float32)
    nxt = np.zeros((num_envs, total, 4), dtype=np.float32)
    terminated = np.zeros((num_envs, total), dtype=bool)
    truncated = np.zeros((num_envs, total), dtype=bool)
    reward = np.zeros((num_envs, total), dtype=np.float32)
    for n in range(num_envs):
        episode, step = 0, 0
        obs[n, 0] = [n, 0, 0, 0]
        for k in range(total):
            step += 1
            nxt[n, k] = [n, episode, step, k + 1]
            reward[n, k] = 10 * k + n
            end = ends.get((n, k))
            if end is not None:
                terminated[n, k] = end in ("terminated", "both")
                truncated[n, k] = end in ("truncated", "both")
                episode, step = episode + 1, 0
            obs[n, k + 1] = [n, episode, step, k + 1]
    return {"obs": obs, "next": nxt, "terminated": terminated, "truncated": truncated, "reward": reward}


def script_ids(done: np.ndarray, first_batch_starts: int = 0) -> np.ndarray:
    """Trajectory ids frame by frame: env n starts with n; then a new id, handed out in time
    order then env order, at the frame after each done."""
    num_envs, total = done.shape
    ids = np.zeros((num_envs, total), dtype=np.int64)
    current = list(range(num_envs))
    next_id = num_envs
    for k in range(total):
        for n in range(num_envs):
            if k > 0 and done[n, k - 1]:
                current[n] = next_id
                next_id += 1
            ids[n, k] = current[n]
    return ids


def action_of(flat_obs: torch.Tensor) -> torch.Tensor:
    """The test policy: 1000 * episode + 10 * step + env, read from the observation."""
    return (1000 * flat_obs[..., 1] + 10 * flat_obs[..., 2] + flat_obs[..., 0]).long()


def flat(td: TensorDictBase, dict_obs: bool) -> torch.Tensor:
    """``[..., 4]``: ``[env, episode, step, taken]`` from a batch's (or ``td["next"]``'s) observation."""
    if not dict_obs:
        return td.get("observation")
    env = td.get(("meta", "env")).float()
    return torch.cat([env[..., None], td.get("count")], -1)


class Rig:
    """What the engine builds around collect_batch, written out for the test."""

    def __init__(self, dict_obs: bool = False, masked: bool = False, config: RolloutConfig | None = None):
        self.dict_obs = dict_obs
        self.envs = CounterEnvs(N, ENDS, dict_obs)
        obs_space, act_space = self.envs.observation_space, self.envs.action_space
        layout = BatchLayout(
            tuple(observation_fields(obs_space)), action_fields(act_space)[0], dict_observations=dict_obs
        )
        self.buffers = BatchBuffers.allocate(layout, N, T, masked=masked)
        self.policy: PolicyAdapter
        if dict_obs:
            module = TensorDictModule(
                lambda count, env: action_of(torch.cat([env.float()[..., None], count], -1)),
                in_keys=["count", ("meta", "env")],
                out_keys=["action"],
            )
            self.policy = make_policy(module, obs_space, act_space, N)
        else:
            self.policy = make_policy(action_of, obs_space, act_space, N)
        self.config = config if config is not None else RolloutConfig()
        self.traj_ids = TrajectoryIds(N)
        self.episodes = EpisodeTracker(N, window=1000)
        self.pending = {f.key: torch.zeros(N, *f.shape, dtype=f.dtype) for f in layout.observations}
        scratch = BatchBuffers.allocate(layout, N, 1)  # the engine resets into scratch buffers
        self.envs.bind(scratch)
        self.envs.reset(slot=0)
        for key, obs in scratch.obs_ext.items():
            self.pending[key].copy_(obs[:, 0])
        self.envs.bind(self.buffers)
        self.policy.bind(self.buffers)

    def collect(self, version: int = 0, stop: np.ndarray | None = None) -> int:
        return collect_batch(
            self.envs, self.policy, self.buffers, self.config, self.traj_ids, self.episodes, version,
            self.pending, stop,
        )

    def pending_flat(self) -> torch.Tensor:
        if not self.dict_obs:
            return self.pending[("observation",)].clone()
        env = self.pending[("meta", "env")].float()
        return torch.cat([env[:, None], self.pending[("count",)]], -1)


@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
def test_batches_follow_the_script(dict_obs: bool) -> None:
    num_batches = 3
    expected = script(N, num_batches * T, ENDS)
    done = expected["terminated"] | expected["truncated"]
    ids = script_ids(done)
    rig = Rig(dict_obs)
    all_ids = []
    for b in range(num_batches):
        window = slice(b * T, (b + 1) * T)
        assert rig.collect(version=b + 7) == T
        batch = rig.buffers.batch
        assert batch.batch_size == torch.Size([N, T])
        assert ("collector", "mask") not in batch.keys(include_nested=True)

        # observation: slot t; ("next", obs): what step t returned, the final observation at an end
        obs, nxt = flat(batch, dict_obs), flat(batch.get("next"), dict_obs)
        assert obs.shape == nxt.shape == (N, T, 4)
        torch.testing.assert_close(obs, torch.from_numpy(expected["obs"][:, window]))
        torch.testing.assert_close(nxt, torch.from_numpy(expected["next"][:, window]))
        assert bool((nxt[..., 2] > 0).all()), "a reset observation stored as a next observation"
        # where no episode ended, the next observation is the following frame's observation
        ended = torch.from_numpy(done[:, window])
        same = (nxt[:, :-1] == obs[:, 1:]).all(-1)
        assert torch.equal(same, ~ended[:, :-1])

        reward = batch["next", "reward"]
        assert reward.shape == (N, T, 1) and reward.dtype == torch.float32
        torch.testing.assert_close(reward[..., 0], torch.from_numpy(expected["reward"][:, window]))
        for flag in ("terminated", "truncated", "done"):
            assert batch["next", flag].shape == (N, T, 1)
            assert batch["next", flag].dtype == torch.bool
        for flag, values in (
            ("terminated", expected["terminated"]),
            ("truncated", expected["truncated"]),
            ("done", done),
        ):
            assert batch["next", flag][..., 0].tolist() == values[:, window].tolist(), flag

        action = batch["action"]
        assert action.shape == (N, T) and action.dtype == torch.int64
        assert torch.equal(action, action_of(obs))
        assert rig.envs.received[b * T : (b + 1) * T] == action.T.tolist()  # the env stepped with them

        assert batch["policy_version"].dtype == torch.int64
        assert torch.equal(batch["policy_version"], torch.full((N, T), b + 7))

        traj = batch["collector", "traj_ids"]
        assert traj.shape == (N, T) and traj.dtype == torch.int64
        assert traj.tolist() == ids[:, window].tolist()
        all_ids.append(traj.clone())

        # the observation after the last step waits for the next batch
        torch.testing.assert_close(rig.pending_flat(), torch.from_numpy(expected["obs"][:, (b + 1) * T]))

    # ids change exactly after each done, and never come back
    stream = torch.cat(all_ids, 1)
    changes = stream[:, 1:] != stream[:, :-1]
    assert torch.equal(changes, torch.from_numpy(done[:, :-1]))
    assert len(stream.unique()) == N + int(done[:, :-1].sum())
    # episode statistics: one per scripted end
    assert rig.episodes.count == len(ENDS)
    lengths = []
    for n in range(N):
        ends = np.nonzero(done[n])[0]
        lengths += np.diff(ends, prepend=-1).tolist()
    assert sorted(rig.episodes.lengths) == sorted(lengths) == [1, 1, 1, 1, 3, 3, 4, 7, 7]


def test_pending_observation_is_carried_into_the_next_batch() -> None:
    rig = Rig()
    rig.collect()
    first = rig.buffers.batch.clone()
    carried = rig.pending_flat()
    rig.collect()
    second = rig.buffers.batch
    # env 0 ended at the last frame of batch 0: batch 1 starts from its reset observation
    assert carried[0].tolist() == [0, 2, 0, T]
    assert first["next", "observation"][0, -1].tolist() == [0, 1, 4, T]
    # envs 1 and 2 did not: batch 1 starts where batch 0's last step left them
    assert torch.equal(carried[1:], first["next", "observation"][1:, -1])
    assert torch.equal(second["observation"][:, 0], carried)
    # the trajectory of env 0 is new in batch 1 (the next id after batch 0's), the others continue
    first_ids = first["collector", "traj_ids"]
    assert first_ids.tolist() == [[0, 3, 3, 3, 3], [1, 1, 1, 4, 4], [2, 2, 2, 2, 2]]
    assert second["collector", "traj_ids"][:, 0].tolist() == [5, 4, 2]


def test_truncate_last_marks_the_last_frame() -> None:
    num_batches = 3
    expected = script(N, num_batches * T, ENDS)
    rig = Rig(config=RolloutConfig(truncate_last=True))
    env_ids = script_ids(expected["terminated"] | expected["truncated"])  # the env's own ends only
    for b in range(num_batches):
        window = slice(b * T, (b + 1) * T)
        assert rig.collect() == T
        batch = rig.buffers.batch
        terminated = expected["terminated"][:, window]
        truncated = expected["truncated"][:, window].copy()
        truncated[:, -1] |= ~terminated[:, -1]  # the cut: truncated unless the episode terminated
        done = terminated | truncated
        assert done[:, -1].all()
        assert batch["next", "terminated"][..., 0].numpy().tolist() == terminated.tolist()
        assert batch["next", "truncated"][..., 0].numpy().tolist() == truncated.tolist()
        assert batch["next", "done"][..., 0].numpy().tolist() == done.tolist()
        # the cut does not reset the envs: observations still follow the script
        torch.testing.assert_close(batch["observation"], torch.from_numpy(expected["obs"][:, window]))
        torch.testing.assert_close(
            batch["next", "observation"], torch.from_numpy(expected["next"][:, window])
        )
        # nor does it start new trajectories: an episode the cut passes through keeps its id (as
        # in TorchRL), and ids change exactly after each end of the env's
        assert batch["collector", "traj_ids"].tolist() == env_ids[:, window].tolist()
    # the cut is no episode end for the statistics
    assert rig.episodes.count == len(ENDS)


def test_stop_flag_masks_the_frames_after_it() -> None:
    expected = script(N, 3 * T, ENDS)
    done = expected["terminated"] | expected["truncated"]
    rig = Rig(masked=True)
    stop = np.zeros(1, dtype=bool)
    rig.envs.stop, rig.envs.stop_after = stop, T + 2  # raised during the third step of batch 1

    assert rig.collect(stop=stop) == T  # not raised in batch 0: every frame is real
    assert bool(rig.buffers.batch["collector", "mask"].all())
    first_ids = rig.buffers.batch["collector", "traj_ids"].clone()

    steps = rig.collect(version=1, stop=stop)
    assert steps == 2
    batch = rig.buffers.batch
    mask = batch["collector", "mask"]
    assert mask.dtype == torch.bool and mask.shape == (N, T)
    assert mask.tolist() == [[True, True, False, False, False]] * N
    real = slice(T, T + steps)
    torch.testing.assert_close(batch["observation"][:, :steps], torch.from_numpy(expected["obs"][:, real]))
    torch.testing.assert_close(
        batch["next", "observation"][:, :steps], torch.from_numpy(expected["next"][:, real])
    )
    assert batch["next", "done"][:, :steps, 0].numpy().tolist() == done[:, real].tolist()
    # masked frames: no ids, no flags
    assert bool((batch["collector", "traj_ids"][:, steps:] == -1).all())
    for flag in ("terminated", "truncated", "done"):
        assert not bool(batch["next", flag][:, steps:].any()), flag
    # the real frames are labelled like an unstopped run
    ids = script_ids(done)
    assert batch["collector", "traj_ids"][:, :steps].tolist() == ids[:, real].tolist()
    assert first_ids.tolist() == ids[:, :T].tolist()
    assert len(rig.envs.received) == T + steps  # the env was not stepped after the stop
    torch.testing.assert_close(rig.pending_flat(), torch.from_numpy(expected["obs"][:, T + steps]))
    assert rig.episodes.count == sum(1 for (_, k) in ENDS if k < T + steps)

    # an already raised flag: one step is collected (every worker advances each batch, as in
    # TorchRL, whose workers read the flag after each step), the rest masked
    assert rig.collect(stop=stop) == 1
    batch = rig.buffers.batch
    assert batch["collector", "mask"].tolist() == [[True, False, False, False, False]] * N
    one = slice(T + steps, T + steps + 1)
    torch.testing.assert_close(batch["observation"][:, :1], torch.from_numpy(expected["obs"][:, one]))
    assert batch["collector", "traj_ids"][:, :1].tolist() == ids[:, one].tolist()
    assert bool((batch["collector", "traj_ids"][:, 1:] == -1).all())
    assert len(rig.envs.received) == T + steps + 1
    steps += 1

    # lowered again: collection continues from the stop, ids and all
    stop[0] = False
    assert rig.collect(stop=stop) == T
    batch = rig.buffers.batch
    assert bool(batch["collector", "mask"].all())
    resumed = slice(T + steps, 2 * T + steps)
    torch.testing.assert_close(batch["observation"], torch.from_numpy(expected["obs"][:, resumed]))
    torch.testing.assert_close(batch["next", "observation"], torch.from_numpy(expected["next"][:, resumed]))
    assert batch["collector", "traj_ids"].tolist() == ids[:, resumed].tolist()


def test_truncate_last_cuts_a_stopped_batch_at_its_last_real_frame() -> None:
    expected = script(N, 2 * T, ENDS)
    rig = Rig(masked=True, config=RolloutConfig(truncate_last=True))
    stop = np.zeros(1, dtype=bool)
    rig.envs.stop, rig.envs.stop_after = stop, 3  # env 1 ends (both flags) at step 2
    assert rig.collect(stop=stop) == 3
    batch = rig.buffers.batch
    assert batch["collector", "mask"].tolist() == [[True] * 3 + [False] * 2] * N
    terminated = expected["terminated"][:, :3]
    truncated = expected["truncated"][:, :3].copy()
    truncated[:, -1] |= ~terminated[:, -1]
    assert batch["next", "terminated"][..., 0].tolist() == [row + [False] * 2 for row in terminated.tolist()]
    assert batch["next", "truncated"][..., 0].tolist() == [row + [False] * 2 for row in truncated.tolist()]
    assert batch["next", "done"][..., 0].tolist() == [
        [True, False, True, False, False],  # env 0 terminated at step 0
        [False, False, True, False, False],
        [False, False, True, False, False],
    ]
    assert batch["collector", "traj_ids"].tolist() == [
        [0, 3, 3, -1, -1],
        [1, 1, 1, -1, -1],
        [2, 2, 2, -1, -1],
    ]
    assert rig.episodes.count == 2  # the cut is not an episode end
    stop[0] = False
    assert rig.collect(stop=stop) == T
    # after the cut, env 1 (its episode ended at step 2) starts trajectory 4; the others go on
    assert rig.buffers.batch["collector", "traj_ids"][:, 0].tolist() == [3, 4, 2]
    torch.testing.assert_close(
        rig.buffers.batch["observation"], torch.from_numpy(expected["obs"][:, 3 : 3 + T])
    )


def test_policy_runs_under_the_exploration_type_in_inference_mode() -> None:
    seen: list[tuple[InteractionType | None, bool]] = []
    rig = Rig(config=RolloutConfig(exploration_type=InteractionType.MODE))

    class Recording(PolicyAdapter):
        def _views(self, buffers: BatchBuffers) -> dict[str, Any]:
            return {}

        def act(self, t: int) -> None:
            seen.append((current_interaction_type(), torch.is_inference_mode_enabled()))

    rig.policy = Recording()
    rig.policy.bind(rig.buffers)
    before = current_interaction_type()
    assert before is not InteractionType.MODE
    assert rig.collect() == T
    assert seen == [(InteractionType.MODE, True)] * T
    assert current_interaction_type() is before  # restored after the batch
    assert not torch.is_inference_mode_enabled()
    assert rig.buffers.batch["next", "reward"][:, :, 0].tolist() == script(N, T, ENDS)["reward"].tolist()


def test_is_init_follows_the_episode_ends_and_is_false_in_masked_frames() -> None:
    obs_space, act_space = spaces.Box(-1, 1, (2,)), spaces.Discrete(2)
    layout = BatchLayout(tuple(observation_fields(obs_space)), action_fields(act_space)[0], is_init=True)
    buffers = BatchBuffers.allocate(layout, 2, 4, masked=True)
    assert buffers.is_init is not None
    pending_obs = {f.key: torch.zeros(2, *f.shape, dtype=f.dtype) for f in layout.observations}
    pending_init = torch.tensor([[True], [False]])

    def finish(steps: int) -> None:
        finish_batch(buffers, steps, RolloutConfig(), TrajectoryIds(2), EpisodeTracker(2, window=10), 0,
                     pending_obs, pending_init)

    buffers.is_init.fill_(True)  # what an earlier batch left
    begin_batch(buffers, pending_obs, pending_init)
    buffers.terminated[0, 1] = True  # env 0's episode ends at step 1, env 1's is cut at step 2
    buffers.truncated[1, 2] = True
    finish(3)
    assert buffers.is_init[..., 0].tolist() == [[True, False, True, False], [False, False, False, False]]
    assert pending_init[:, 0].tolist() == [False, True]

    buffers.is_init.fill_(True)
    begin_batch(buffers, pending_obs, pending_init)
    finish(0)  # stopped before its first step: every frame masked, the next batch starts as this one
    assert not bool(buffers.is_init.any())
    assert pending_init[:, 0].tolist() == [False, True]


class LoggedGroups:
    """A grouped served policy's side for :func:`step_in_groups`, logging each call."""

    def __init__(self, log: list[tuple[Any, ...]], rows: tuple[tuple[int, int], ...]) -> None:
        self.log, self.rows, self.due = log, rows, set()

    def ask(self, t: int, group: int) -> None:
        self.log.append(("ask", t, group))
        self.due.add(group)

    def wait(self, group: int) -> None:
        assert group in self.due, "a group waits only for an answer it asked for"
        self.due.discard(group)
        self.log.append(("wait", group))

    def settle(self) -> None:
        self.log.append(("settle", *sorted(self.due)))
        self.due.clear()


class LoggedRows:
    """An env batch that logs which rows step at which step; ``fail_at`` (t, start) raises there."""

    def __init__(self, log: list[tuple[Any, ...]], fail_at: tuple[int, int] | None = None) -> None:
        self.log, self.fail_at = log, fail_at

    def step_rows(self, t: int, start: int, stop: int) -> None:
        self.log.append(("step", t, start, stop))
        if (t, start) == self.fail_at:
            raise ValueError(f"env {start} failed at step {t}")


def test_step_in_groups_steps_one_group_while_the_next_is_served() -> None:
    from rlcollect.rollout.loop import step_in_groups

    log: list[tuple[Any, ...]] = []
    policy = LoggedGroups(log, ((0, 2), (2, 4)))
    assert step_in_groups(LoggedRows(log), policy, 2) == 2  # type: ignore[arg-type]
    assert log == [("ask", 0, 0), ("ask", 0, 1),
                   ("wait", 0), ("step", 0, 0, 2), ("ask", 1, 0),  # group 1's step-0 actions meanwhile
                   ("wait", 1), ("step", 0, 2, 4), ("ask", 1, 1),
                   ("wait", 0), ("step", 1, 0, 2), ("wait", 1), ("step", 1, 2, 4)]
    assert not policy.due  # nothing asked is left unanswered


def test_step_in_groups_reads_stop_once_a_step_and_settles_before_an_env_error() -> None:
    from rlcollect.rollout.loop import step_in_groups

    log: list[tuple[Any, ...]] = []
    stop = np.zeros(1, dtype=bool)
    envs = LoggedRows(log)
    envs.step_rows = lambda t, start, end: (log.append(("step", t, start, end)),  # type: ignore[method-assign]
                                            stop.__setitem__(0, stop[0] or (t == 1 and start == 2)))
    policy = LoggedGroups(log, ((0, 1), (1, 2), (2, 3)))
    # raised while group 2 steps at t=1, after group 0 asked for step 2: read where group 0 would
    # ask for step 3, so every group takes 3 steps and no answer is left due
    assert step_in_groups(envs, policy, 5, stop) == 3  # type: ignore[arg-type]
    assert [entry for entry in log if entry[0] == "step"][-3:] == [("step", 2, 0, 1), ("step", 2, 1, 2),
                                                                  ("step", 2, 2, 3)]
    assert not policy.due and log[-1] == ("step", 2, 2, 3) and ("ask", 3, 0) not in log

    log.clear()
    errors: list[tuple[int, str]] = []
    policy = LoggedGroups(log, ((0, 2), (2, 4)))
    with pytest.raises(ValueError, match="env 0 failed at step 1"):
        step_in_groups(LoggedRows(log, fail_at=(1, 0)), policy, 4,  # type: ignore[arg-type]
                       on_error=lambda t, error: errors.append((t, str(error))))
    assert log[-2:] == [("step", 1, 0, 2), ("settle", 1)]  # group 1's step-1 answer awaited first
    assert errors == [(1, "env 0 failed at step 1")] and not policy.due
