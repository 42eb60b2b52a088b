"""Asynchronous EnvPool (``batch_size`` < ``num_envs``) in one process, against a plain async loop.

The reference is the loop one writes by hand on EnvPool's ``send`` / ``recv``: receive whichever
envs answered, record the step each completed (the observation and action it was sent, what it
answered), act on them, send. An env that finished answers next with its reset observation, which
completes no step. With one EnvPool thread the order of answers is fixed, so the collector's
frames, read batch after batch and row after row, equal the reference's list value for value; with
more threads the order varies from run to run but each env's own frames do not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule

from rlcollect import Collector, split_trajectories
from rlcollect.envs import envpool_env
from tests.envs.test_envpool import PongPolicy, PushRight

envpool = pytest.importorskip("envpool", reason="EnvPool tests need envpool: pip install rlcollect[envpool]")

pytestmark = pytest.mark.timeout(120)

NAMES = ("env", "obs", "action", "reward", "next", "term", "trunc")


def reference(task: str, policy: torch.nn.Module, num_envs: int, batch_size: int, frames: int, seed: int,
              **kwargs: Any) -> dict[str, np.ndarray]:
    """The first ``frames`` steps a plain async loop completes, in the order they complete."""
    pool = envpool.make(task, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size, seed=seed,
                        **kwargs)
    pool.async_reset()
    sent: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # env -> (observation, action) it was sent
    resetting = set(range(num_envs))
    record: dict[str, list[Any]] = {name: [] for name in NAMES}
    with torch.inference_mode():
        while len(record["env"]) < frames:
            obs, reward, terminated, truncated, info = pool.recv()
            for row, env in enumerate(info["env_id"].tolist()):
                if env in resetting:
                    resetting.discard(env)
                    continue
                values = (env, *sent[env], reward[row], obs[row], terminated[row], truncated[row])
                for name, value in zip(NAMES, values, strict=True):
                    record[name].append(np.array(value))
                if terminated[row] or truncated[row]:
                    resetting.add(env)
            action = policy(torch.from_numpy(obs)).numpy()
            for row, env in enumerate(info["env_id"].tolist()):
                sent[env] = (np.array(obs[row]), np.array(action[row]))
            pool.send(action, info["env_id"])
    pool.close()
    return {name: np.stack(values[:frames]) for name, values in record.items()}


def frames(batches: list[TensorDictBase]) -> dict[str, np.ndarray]:
    """The batches' frames in the order they completed (batch after batch, row after row)."""
    keys = {"env": ("collector", "env_ids"), "obs": "observation", "action": "action",
            "reward": ("next", "reward"), "next": ("next", "observation"), "term": ("next", "terminated"),
            "trunc": ("next", "truncated")}
    return {name: torch.cat([b[key].reshape(-1, *b[key].shape[2:]) for b in batches]).numpy().squeeze()
            if name in ("reward", "term", "trunc") else
            torch.cat([b[key].reshape(-1, *b[key].shape[2:]) for b in batches]).numpy()
            for name, key in keys.items()}


def collect(source: Any, policy: Any, *, rows: int, steps: int, batches: int,
            **kwargs: Any) -> list[TensorDictBase]:
    with Collector(source, policy, frames_per_batch=rows * steps, total_frames=rows * steps * batches,
                   **kwargs) as collector:
        return [batch.clone() for batch in collector]


def assert_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name in NAMES:
        assert np.array_equal(got[name], want[name].astype(got[name].dtype)), name


def assert_whole_trajectories(batches: list[TensorDictBase]) -> None:
    """``split_trajectories`` regroups the frames into trajectories of one env each, in time order:
    each frame's next observation is the following frame's observation, done only at the end."""
    trajectories = split_trajectories(torch.cat(batches, 0))
    mask = trajectories["collector", "mask"]
    assert mask.sum() == sum(b.numel() for b in batches)
    for traj in range(trajectories.shape[0]):
        length = int(mask[traj].sum())
        one = trajectories[traj, :length]
        assert one["collector", "env_ids"].unique().numel() == 1
        assert torch.equal(one["next", "observation"][:-1], one["observation"][1:])
        assert not one["next", "done"][:-1].any()


@pytest.mark.parametrize("raw", [True, False], ids=["raw-recv-send", "public-recv-send"])
def test_async_cartpole_equals_a_plain_async_loop(raw: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """4 envs answering 2 at a time, one EnvPool thread: the same frames in the same order, through
    EnvPool's raw ``_recv`` / ``_send`` (this EnvPool has them) or its public ``recv`` / ``send``."""
    probe = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=2)
    assert envpool_env._raw_access(probe) is not None  # the raw calls are used, not silently skipped
    probe.close()
    if not raw:
        monkeypatch.setattr(envpool_env, "_raw_access", lambda pool: None)
    pool = {"batch_size": 2, "num_threads": 1, "max_episode_steps": 10}
    got = collect("envpool:CartPole-v1", PushRight(), rows=2, steps=25, batches=4, num_envs=4, seed=7,
                  create_env_kwargs=pool)
    assert got[0].batch_size == (2, 25)
    want = reference("CartPole-v1", PushRight(), 4, 2, 200, seed=7, num_threads=1, max_episode_steps=10)
    assert want["term"].sum() > 10 and want["trunc"].sum() > 0  # both kinds of episode end happen
    assert_equal(frames(got), want)
    assert_whole_trajectories(got)
    again = collect("envpool:CartPole-v1", PushRight(), rows=2, steps=25, batches=4, num_envs=4, seed=7,
                    create_env_kwargs=pool)
    assert all((a == b).all() for a, b in zip(got, again, strict=True))  # one thread: run after run


class FirstJoints(torch.nn.Module):
    """A continuous policy: the tanh of the first 6 observations."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(obs[:, :6])


def test_async_halfcheetah_continuous_actions_equal_a_plain_async_loop() -> None:
    """Float actions go to EnvPool in its own dtype (float64) through the raw ``_send``: the same
    frames as the public loop's."""
    pool = {"batch_size": 2, "num_threads": 1, "max_episode_steps": 15}
    got = collect("envpool:HalfCheetah-v4", FirstJoints(), rows=2, steps=20, batches=2, num_envs=4, seed=5,
                  create_env_kwargs=pool)
    want = reference("HalfCheetah-v4", FirstJoints(), 4, 2, 80, seed=5, num_threads=1, max_episode_steps=15)
    assert want["trunc"].sum() > 0
    assert_equal(frames(got), want)


@pytest.mark.parametrize("steps", [1, 3])
def test_batches_shorter_than_an_answer(steps: int) -> None:
    """``T`` < ``B``: one answer's frames span several rows, and batches end inside answers."""
    pool = {"batch_size": 4, "num_threads": 1, "max_episode_steps": 10}
    got = collect("envpool:CartPole-v1", PushRight(), rows=4, steps=steps, batches=30 // steps, num_envs=8,
                  seed=2, create_env_kwargs=pool)
    assert got[0].batch_size == (4, steps)
    want = reference("CartPole-v1", PushRight(), 8, 4, 4 * steps * (30 // steps), seed=2, num_threads=1,
                     max_episode_steps=10)
    assert_equal(frames(got), want)
    assert_whole_trajectories(got)


def test_async_pong_equals_a_plain_async_loop() -> None:
    pool = {"batch_size": 2, "num_threads": 1, "max_episode_steps": 15}
    got = collect("envpool:Pong-v5", PongPolicy(), rows=2, steps=10, batches=3, num_envs=4, seed=3,
                  create_env_kwargs=pool)
    assert got[0]["observation"].shape == (2, 10, 4, 84, 84) and got[0]["observation"].dtype == torch.uint8
    want = reference("Pong-v5", PongPolicy(), 4, 2, 60, seed=3, num_threads=1, max_episode_steps=15)
    assert want["trunc"].sum() > 0
    assert_equal(frames(got), want)


def test_with_threads_each_env_follows_its_own_course() -> None:
    """Two EnvPool threads: the order of answers varies, but each env's frames are the plain
    loop's for that env, and the ids keep every trajectory whole."""
    pool = {"batch_size": 4, "num_threads": 2, "max_episode_steps": 12}
    got = collect("envpool:CartPole-v1", PushRight(), rows=4, steps=20, batches=3, num_envs=8, seed=1,
                  create_env_kwargs=pool)
    want = reference("CartPole-v1", PushRight(), 8, 4, 2000, seed=1, num_threads=1, max_episode_steps=12)
    have = frames(got)
    for env in range(8):
        mine, theirs = have["env"] == env, want["env"] == env
        count = int(mine.sum())
        assert 0 < count <= int(theirs.sum())
        for name in NAMES[1:]:
            assert np.array_equal(have[name][mine], want[name][theirs][:count].astype(have[name].dtype)), name
    assert_whole_trajectories(got)


class PushRightTD(torch.nn.Module):
    """:class:`PushRight` with a weight (for updates) and a ``score`` extra: the observation's sum."""

    def __init__(self) -> None:
        super().__init__()
        self.zero = torch.nn.Parameter(torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return PushRight()(obs) + self.zero.long(), obs.sum(-1) + self.zero


def test_a_pool_you_built_extras_versions_and_episodes() -> None:
    """An async pool passed in; a TensorDict policy's extras and the weights' version travel with
    the action that went out; episode statistics count each env's own episodes."""
    pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=2, seed=0, num_threads=1)
    policy = TensorDictModule(PushRightTD(), in_keys=["observation"], out_keys=["action", "score"])
    versions = []
    with Collector(pool, policy, frames_per_batch=20, total_frames=200) as collector:
        for i, batch in enumerate(collector):
            assert torch.allclose(batch["score"], batch["observation"].sum(-1))
            versions.append(batch["policy_version"].unique().tolist())
            if i == 2:
                collector.update_policy_weights_()
            if i == 5:
                stats = collector.stats()
    # a batch may open with the held answer's frames, chosen before the update: version 0 there
    assert versions[2] == [0] and versions[3] in ([0, 1], [1]) and versions[-1] == [1]
    want = reference("CartPole-v1", PushRight(), 4, 2, 120, seed=0, num_threads=1)
    returns = episode_returns(want)
    assert stats.episodes == len(returns) > 5 and stats.mean_return == pytest.approx(np.mean(returns))


def episode_returns(want: dict[str, np.ndarray]) -> list[float]:
    """The returns of the episodes the reference's frames end, in the order they end."""
    returns, running = [], dict.fromkeys(range(int(want["env"].max()) + 1), 0.0)
    for env, reward, end in zip(want["env"].tolist(), want["reward"].tolist(),
                                (want["term"] | want["trunc"]).tolist(), strict=True):
        running[env] += reward
        if end:
            returns.append(running[env])
            running[env] = 0.0
    return returns


def test_reseeding_and_resets_receive_what_is_in_flight() -> None:
    """``set_seed`` mid-run rebuilds a pool built from a name: the next batches are a fresh
    collector's; ``reset_at_each_iter`` resets a pool you built after receiving the envs in flight,
    and each env's last frame of a batch ends its trajectory."""
    pool = {"batch_size": 2, "num_threads": 1}
    fresh = collect("envpool:CartPole-v1", PushRight(), rows=2, steps=10, batches=2, num_envs=4, seed=5,
                    create_env_kwargs=pool)
    with Collector("envpool:CartPole-v1", PushRight(), num_envs=4, create_env_kwargs=pool,
                   frames_per_batch=20, total_frames=100, seed=0) as collector:
        batches = iter(collector)
        next(batches)
        collector.set_seed(5)
        again = [next(batches).clone(), next(batches).clone()]
    for a, b in zip(fresh, again, strict=True):  # new trajectories, new ids: the frames are the same
        assert (a.exclude(("collector", "traj_ids")) == b.exclude(("collector", "traj_ids"))).all()
    built = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=2, seed=0, num_threads=1)
    got = collect(built, PushRight(), rows=2, steps=10, batches=3, reset_at_each_iter=True)
    for batch in got:
        have = frames([batch])
        for env in range(4):
            mine = have["env"] == env
            assert np.abs(have["obs"][mine][0]).max() <= 0.05  # a reset observation (CartPole's: +-0.05)
            assert have["term"][mine][-1] or have["trunc"][mine][-1]
    ids = [set(b["collector", "traj_ids"].unique().tolist()) for b in got]
    assert not ids[0] & ids[1] and not ids[1] & ids[2]


@pytest.mark.timeout(240)
def test_workers_each_step_an_async_pool() -> None:
    """MultiSync / MultiAsync workers each build an asynchronous pool of their envs (worker ``w``:
    envs ``4w .. 4w + 3``, seeded ``s + 4w ..``, as EnvPool seeds a pool of all 8 envs): each env's
    frames are the plain loop's for that env."""
    from rlcollect import MultiAsyncCollector, MultiSyncCollector

    for kind, frames_per_batch in ((MultiSyncCollector, 40), (MultiAsyncCollector, 20)):
        with kind("envpool:CartPole-v1", PushRight(), num_workers=2, num_envs_per_worker=4, seed=3,
                  create_env_kwargs=WORKER_POOL, frames_per_batch=frames_per_batch,
                  total_frames=160) as collector:
            got = [batch.clone() for batch in collector]
        assert got[0].batch_size == (4 if kind is MultiSyncCollector else 2, 10)
        assert_each_env_follows_the_reference(got, kind.__name__)


@pytest.mark.timeout(240)
def test_ray_actors_each_step_an_async_pool(ray_session: None) -> None:
    from rlcollect import RayCollector

    for sync in (True, False):
        with RayCollector("envpool:CartPole-v1", PushRight(), num_collectors=2, sync=sync, seed=3,
                          collector_kwargs={"num_envs": 4, "create_env_kwargs": WORKER_POOL},
                          frames_per_batch=40 if sync else 20, total_frames=160) as collector:
            got = [batch.clone() for batch in collector]
        assert got[0].batch_size == (4 if sync else 2, 10)
        assert_each_env_follows_the_reference(got, f"RayCollector(sync={sync})")


@pytest.mark.timeout(240)
def test_workers_each_step_an_async_pong_pool() -> None:
    from rlcollect import MultiSyncCollector

    with MultiSyncCollector("envpool:Pong-v5", PongPolicy(), num_workers=2, num_envs_per_worker=2, seed=4,
                            create_env_kwargs={"batch_size": 1, "max_episode_steps": 15},
                            frames_per_batch=20, total_frames=60) as collector:
        got = [batch.clone() for batch in collector]
    assert got[0].batch_size == (2, 10) and got[0]["observation"].dtype == torch.uint8
    want = reference("Pong-v5", PongPolicy(), 4, 2, 120, seed=4, num_threads=1, max_episode_steps=15)
    assert want["trunc"].sum() > 0
    assert_each_env_follows_the_reference(got, "MultiSyncCollector, Pong", want, envs=4)


WORKER_POOL = {"batch_size": 2, "max_episode_steps": 12}


def assert_each_env_follows_the_reference(got: list[TensorDictBase], name: str,
                                          want: dict[str, np.ndarray] | None = None, envs: int = 8) -> None:
    """Workers' pools (by default two of 4, :data:`WORKER_POOL`, seed 3): env by env, the frames of
    one pool of all the envs (``want``)."""
    if want is None:
        want = reference("CartPole-v1", PushRight(), 8, 2, 2000, seed=3, num_threads=1, max_episode_steps=12)
    have = frames(got)
    for env in range(envs):
        mine, theirs = have["env"] == env, want["env"] == env
        assert 0 < int(mine.sum()) <= int(theirs.sum()), name
        for key in NAMES[1:]:
            expected = want[key][theirs][: int(mine.sum())].astype(have[key].dtype)
            assert np.array_equal(have[key][mine], expected), (name, env, key)
    assert_whole_trajectories(got)


def test_async_pool_errors_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="num_envs=6 with batch_size=4: num_envs must be a multiple of"):
        Collector("envpool:CartPole-v1", None, num_envs=6, frames_per_batch=8,
                  create_env_kwargs={"batch_size": 4})
    with pytest.raises(ValueError, match=r"max_frames_per_traj=5 with an async.*'max_episode_steps': 5"):
        Collector("envpool:CartPole-v1", None, num_envs=4, frames_per_batch=8, max_frames_per_traj=5,
                  create_env_kwargs={"batch_size": 2})
    from rlcollect import AsyncBatchedCollector

    with pytest.raises(ValueError, match="AsyncBatchedCollector with an asynchronous EnvPool"):
        AsyncBatchedCollector("envpool:CartPole-v1", PushRight(), num_envs=4, envs_per_worker=4,
                              frames_per_batch=8, create_env_kwargs={"batch_size": 2})


def test_batch_size_outside_the_pool_is_named() -> None:
    with pytest.raises(ValueError, match=r"'batch_size': 8\} with num_envs=4: .*from 1 to num_envs=4"):
        Collector("envpool:CartPole-v1", None, num_envs=4, frames_per_batch=8,
                  create_env_kwargs={"batch_size": 8})


def test_whole_episodes_per_batch() -> None:
    """``trajs_per_batch`` assembles an asynchronous pool's interleaved frames into whole episodes."""
    with Collector("envpool:CartPole-v1", PushRight(), num_envs=4, frames_per_batch=20, total_frames=400,
                   seed=0, create_env_kwargs={"batch_size": 2}, trajs_per_batch=1,
                   traj_format="cat") as collector:
        episodes = [episode.clone() for _, episode in zip(range(8), collector, strict=False)]
    for episode in episodes:
        assert episode["collector", "env_ids"].unique().numel() == 1
        assert torch.equal(episode["next", "observation"][:-1], episode["observation"][1:])
        assert episode["next", "done"][-1].all() and not episode["next", "done"][:-1].any()
        assert np.abs(episode["observation"][0].numpy()).max() <= 0.05  # from a reset
