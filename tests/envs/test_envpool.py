"""EnvPool in one process: ``"envpool:<task>"`` and a pool you built, against a plain EnvPool loop.

The reference steps the same pool with the same policy the way one writes it by hand: observe,
act, step; where an env finished, keep the step's observation as the final one and reset that env
at once by id (``reset(env_ids)``) for the next frame. The collector's batches, put end to end,
must equal it value for value: observations, actions, rewards, true final observations,
``terminated`` apart from ``truncated``; trajectory ids change exactly after a done.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase

from rlcollect import Collector
from tests.envs_for_tests import assert_ids_label_trajectories

envpool = pytest.importorskip("envpool", reason="EnvPool tests need envpool: pip install rlcollect[envpool]")

pytestmark = pytest.mark.timeout(120)


class PushRight(torch.nn.Module):
    """CartPole: push right unless the pole leans far left (episodes end every dozen steps or so)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs[:, 2] > -0.15).long()


class PongPolicy(torch.nn.Module):
    """Pong (``[N, 4, 84, 84]`` uint8): an action from the frames' brightness, deterministic."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[:, -1, 30:60, 40:80].float().mean((1, 2)).long() % 6


def reference(task: str, policy: torch.nn.Module, num_envs: int, steps: int, seed: int,
              **kwargs: Any) -> dict[str, np.ndarray]:
    """``steps`` steps of a plain loop on ``envpool.make(task, ...)``: ``[N, steps, ...]`` arrays."""
    env = envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)
    obs, _ = env.reset()
    names = ("obs", "action", "reward", "next", "term", "trunc")
    record: dict[str, list[np.ndarray]] = {name: [] for name in names}
    with torch.inference_mode():
        for _ in range(steps):
            action = policy(torch.from_numpy(obs)).numpy()
            next_obs, reward, terminated, truncated, _ = env.step(action)
            values = (obs, action, reward, next_obs, terminated, truncated)
            for key, value in zip(names, values, strict=True):
                record[key].append(np.array(value))
            done = terminated | truncated
            obs = np.array(next_obs)
            if done.any():
                ids = np.flatnonzero(done)
                fresh, _ = env.reset(ids)
                obs[ids] = fresh
    env.close()
    return {key: np.stack(values, 1) for key, values in record.items()}


def joined(batches: list[TensorDictBase], key: Any) -> np.ndarray:
    return torch.cat([batch[key] for batch in batches], 1).numpy()


def assert_equal_to_reference(batches: list[TensorDictBase], want: dict[str, np.ndarray]) -> None:
    assert np.array_equal(joined(batches, "observation"), want["obs"])
    assert np.array_equal(joined(batches, "action"), want["action"])
    assert np.array_equal(joined(batches, ("next", "reward"))[..., 0], want["reward"].astype(np.float32))
    assert np.array_equal(joined(batches, ("next", "observation")), want["next"])
    assert np.array_equal(joined(batches, ("next", "terminated"))[..., 0], want["term"])
    assert np.array_equal(joined(batches, ("next", "truncated"))[..., 0], want["trunc"])
    done = joined(batches, ("next", "done"))[..., 0]
    assert np.array_equal(done, want["term"] | want["trunc"])
    assert_ids_label_trajectories(batches)


def collect(source: Any, policy: torch.nn.Module, *, num_envs: int, steps: int, batches: int,
            **kwargs: Any) -> list[TensorDictBase]:
    envs = source.config["num_envs"] if not isinstance(source, str) else num_envs  # a pool brings its own
    with Collector(source, policy, num_envs=num_envs, frames_per_batch=envs * steps,
                   total_frames=envs * steps * batches, **kwargs) as collector:
        return [batch.clone() for batch in collector]


def test_cartpole_by_name_equals_a_plain_envpool_loop() -> None:
    got = collect("envpool:CartPole-v1", PushRight(), num_envs=4, steps=25, batches=4, seed=7,
                  create_env_kwargs={"max_episode_steps": 10})
    want = reference("CartPole-v1", PushRight(), 4, 100, seed=7, max_episode_steps=10)
    assert want["term"].sum() > 10 and want["trunc"].sum() > 0  # both kinds of episode end happen
    assert_equal_to_reference(got, want)
    again = collect("envpool:CartPole-v1", PushRight(), num_envs=4, steps=25, batches=4, seed=7,
                    create_env_kwargs={"max_episode_steps": 10})
    assert all((a == b).all() for a, b in zip(got, again, strict=True))  # a seed gives the same batches
    other = collect("envpool:CartPole-v1", PushRight(), num_envs=4, steps=25, batches=1, seed=8,
                    create_env_kwargs={"max_episode_steps": 10})
    assert not torch.equal(other[0]["observation"], got[0]["observation"])


def test_pong_by_name_equals_a_plain_envpool_loop() -> None:
    got = collect("envpool:Pong-v5", PongPolicy(), num_envs=2, steps=20, batches=3, seed=3,
                  create_env_kwargs={"max_episode_steps": 25})
    assert got[0]["observation"].shape == (2, 20, 4, 84, 84) and got[0]["observation"].dtype == torch.uint8
    want = reference("Pong-v5", PongPolicy(), 2, 60, seed=3, max_episode_steps=25)
    assert want["trunc"].sum() > 0
    assert_equal_to_reference(got, want)


def test_a_pool_you_built_is_stepped_as_it_is() -> None:
    """A pool passed in keeps its own seed (a warning names it when the collector is given
    another); the collector's own limit (max_frames_per_traj) truncates on top of EnvPool's."""
    pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=3, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no seed asked for: no warning
        got = collect(pool, PushRight(), num_envs=1, steps=30, batches=2, max_frames_per_traj=9)
    trunc = joined(got, ("next", "truncated"))[..., 0]
    assert trunc.any()
    want = reference("CartPole-v1", PushRight(), 3, 60, seed=11)
    # until an env's first truncation by the collector, its frames are the plain loop's
    first_cut = np.argmax(trunc & ~want["trunc"], axis=1)
    for env in range(3):
        stop = int(first_cut[env]) + 1 if trunc[env].any() else 60
        assert np.array_equal(joined(got, "observation")[env, :stop], want["obs"][env, :stop])
    pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=11)
    with pytest.warns(RuntimeWarning, match="seeded with seed=11 when it was built.*seed=5 is not applied"):
        collect(pool, PushRight(), num_envs=1, steps=5, batches=1, seed=5)


def test_envpool_errors_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="EnvPool has no task 'NoSuchTask-v0'"):
        Collector("envpool:NoSuchTask-v0", None, frames_per_batch=8)
    with pytest.raises(ValueError, match="'num_envs' is set by the collector"):
        Collector("envpool:CartPole-v1", None, frames_per_batch=8, create_env_kwargs={"num_envs": 3})
    with pytest.raises(ValueError, match=r"seed 1099511627776 .* beyond the seeds EnvPool takes"):
        Collector("envpool:CartPole-v1", None, frames_per_batch=8, seed=2**40)  # EnvPool: an assert
    pool = envpool.make("CartPole-v1", env_type="dm", num_envs=2)
    with pytest.raises(ValueError, match="EnvPool pools with Gymnasium's API"):
        Collector(pool, None, frames_per_batch=8)
    pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2)
    with pytest.raises(ValueError, match="num_envs=3 with an EnvPool pool of 2 envs"):
        Collector(pool, None, num_envs=3, frames_per_batch=8)


def test_workers_build_their_own_pools_and_match_one_process() -> None:
    """``"envpool:CartPole-v1"`` in MultiSync / MultiAsync / AsyncBatched workers: each builds a pool
    of its envs, seeded with its block of seeds, so the frames equal one process's pool of all the
    envs (asynchronous ones: worker ``w``'s batches are rows ``2w, 2w + 1``)."""
    from rlcollect import AsyncBatchedCollector, MultiAsyncCollector, MultiSyncCollector

    kwargs: dict[str, Any] = {"create_env_kwargs": {"max_episode_steps": 10}, "seed": 3}
    single = collect("envpool:CartPole-v1", PushRight(), num_envs=4, steps=10, batches=4, **kwargs)
    with MultiSyncCollector("envpool:CartPole-v1", PushRight(), num_workers=2, num_envs_per_worker=2,
                            frames_per_batch=40, total_frames=160, **kwargs) as collector:
        synced = [batch.clone() for batch in collector]
    assert len(synced) == 4
    for have, want in zip(synced, single, strict=True):
        assert torch.equal(have["observation"], want["observation"])
        assert torch.equal(have["next", "truncated"], want["next", "truncated"])
    for asynchronous in (
        MultiAsyncCollector("envpool:CartPole-v1", PushRight(), num_workers=2, num_envs_per_worker=2,
                            frames_per_batch=20, total_frames=160, **kwargs),
        AsyncBatchedCollector("envpool:CartPole-v1", PushRight(), num_envs=4, envs_per_worker=2,
                              frames_per_batch=20, total_frames=160, **kwargs),
    ):
        with asynchronous as collector:
            batches = [batch.clone() for batch in collector]
        for worker in range(2):
            mine = [b for b in batches if int(b["collector", "traj_ids"][0, 0]) % 2 == worker]
            assert len(mine) >= 2, type(collector).__name__
            for have, want in zip(mine, single, strict=False):
                assert torch.equal(have["observation"], want["observation"][2 * worker : 2 * worker + 2])


@pytest.mark.timeout(240)
def test_pong_in_workers_equals_a_plain_envpool_loop() -> None:
    """Two MultiSync workers, each a pool of 2 Pong envs seeded with its block of seeds: the batches
    equal a plain loop on one pool of all 4 envs."""
    from rlcollect import MultiSyncCollector

    with MultiSyncCollector("envpool:Pong-v5", PongPolicy(), num_workers=2, num_envs_per_worker=2, seed=3,
                            create_env_kwargs={"max_episode_steps": 25}, frames_per_batch=80,
                            total_frames=240) as collector:
        got = [batch.clone() for batch in collector]
    want = reference("Pong-v5", PongPolicy(), 4, 60, seed=3, max_episode_steps=25)
    assert want["trunc"].sum() > 0
    assert_equal_to_reference(got, want)


def test_a_worker_builds_its_pool_with_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """One process: EnvPool's own choice of threads; a worker (built here, in this process): one,
    unless ``create_env_kwargs`` says otherwise."""
    import cloudpickle

    from rlcollect.envs import envpool_env
    from rlcollect.rollout.engine import RolloutSpec
    from rlcollect.weights.store import WeightStore
    from rlcollect.workers.worker import WorkerSetup, start_worker

    monkeypatch.setattr(envpool_env, "POOL_THREADS", None)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the worker's, in this process
    with Collector("envpool:CartPole-v1", None, num_envs=4, frames_per_batch=8) as collector:
        assert collector._rollout.envs.env.config["num_threads"] != 1  # type: ignore[attr-defined]
    for kwargs, threads in (({}, 1), ({"num_threads": 2}, 2)):
        setup = WorkerSetup(worker_idx=0, num_workers=2, num_steps=4, env_offset=0, seed=0,
                            spec=cloudpickle.dumps(RolloutSpec("envpool:CartPole-v1", num_envs=4,
                                                               create_env_kwargs=kwargs)),
                            weights=WeightStore({}, 2).receiver(0))
        worker, (kind, _) = start_worker(setup)
        assert kind == "ready"
        assert worker.rollout.envs.env.config["num_threads"] == threads  # type: ignore[attr-defined]
        worker.close()
