"""An env the user built (``Collector(gym.make("CartPole-v1"), ...)``, as TorchRL's and SB3's
users pass one) is one env: the single-process collector steps it as it is; each worker of a
multi-process collector steps a copy of it, seeded as its own."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from tests.envs_for_tests import TiltPolicy

pytestmark = pytest.mark.timeout(120)


def test_an_instance_equals_its_factory() -> None:
    env = gym.make("CartPole-v1")
    with Collector(env, TiltPolicy(), frames_per_batch=40, total_frames=80, seed=3) as collector:
        assert collector.env is env  # stepped as it is
        got = [batch.clone() for batch in collector]
    with Collector("CartPole-v1", TiltPolicy(), frames_per_batch=40, total_frames=80, seed=3) as collector:
        expected = [batch.clone() for batch in collector]
    assert len(got) == len(expected) == 2
    for a, b in zip(got, expected, strict=True):
        assert a.batch_size == (1, 40) and (a == b).all()


def test_workers_step_copies() -> None:
    env = gym.make("CartPole-v1")
    with MultiSyncCollector(env, TiltPolicy(), num_workers=2, frames_per_batch=40, total_frames=80,
                            seed=3) as collector:
        got = [batch.clone() for batch in collector]
    with MultiSyncCollector("CartPole-v1", TiltPolicy(), num_workers=2, frames_per_batch=40, total_frames=80,
                            seed=3) as collector:
        expected = [batch.clone() for batch in collector]
    for a, b in zip(got, expected, strict=True):
        assert a.batch_size == (2, 20) and (a == b).all()
    assert not torch.equal(got[0]["observation"][0], got[0]["observation"][1])  # seeded s and s + 1


def reset_cartpole() -> gym.Env:
    """An env the user has already reset (as a check or a first look does): its generator is set,
    and every copy of it holds the same one."""
    env = gym.make("CartPole-v1")
    env.reset(seed=7)
    return env


def reset_vector_env() -> gym.vector.VectorEnv:
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    env.reset(seed=7)
    return env


def reset_torchrl_env() -> object:
    from torchrl.envs import GymEnv

    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    env.set_seed(7)
    env.reset()
    return env


@pytest.mark.parametrize(("cls", "source"), [
    *[(cls, source) for cls in (MultiSyncCollector, MultiAsyncCollector)
      for source in ("instance", "vector", "torchrl", "envpool")],
    (AsyncBatchedCollector, "instance"), (AsyncBatchedCollector, "envpool"),  # its workers step these
])
def test_unseeded_workers_never_step_the_same_episodes(cls: type, source: str) -> None:
    """Without a seed, each worker draws its own: copies of one env (an instance the user reset, a
    vector env, a TorchRL env, EnvPool pools, which the collector builds with one seed) started the
    same episodes in every worker, and a deterministic policy then collected them twice."""
    if source == "torchrl":
        pytest.importorskip("torchrl")
    if source == "envpool":
        pytest.importorskip("envpool")
    env = {"instance": reset_cartpole, "vector": reset_vector_env, "torchrl": reset_torchrl_env,
           "envpool": lambda: "envpool:CartPole-v1"}[source]()
    per_worker = 2 if source in ("vector", "envpool") else 1
    workers = ({"num_envs": 2 * per_worker, "envs_per_worker": per_worker}
               if cls is AsyncBatchedCollector else {"num_workers": 2, "num_envs_per_worker": per_worker})
    if source == "vector":
        workers["num_envs_per_worker"] = 1  # the vector env brings its 2
    first: dict[int, torch.Tensor] = {}  # worker (ids are local * 2 + worker): its rows' first obs
    with cls(env, TiltPolicy(), frames_per_batch=40 * per_worker, total_frames=-1, **workers) as collector:
        for batch, _ in zip(collector, range(10), strict=False):
            for row in range(batch.shape[0]):
                worker = int(batch["collector", "traj_ids"][row, 0]) % 2
                seen = first.get(worker, torch.zeros(0, 4))
                if len(seen) < per_worker:
                    first[worker] = torch.cat([seen, batch["observation"][row, :1]])
            if len(first) == 2 and all(len(obs) == per_worker for obs in first.values()):
                break
    assert not torch.equal(first[0], first[1])  # the workers' first observations differ


def test_unseeded_ray_actors_never_step_the_same_episodes(ray_session: None) -> None:
    """The same for Ray actors, each with a ``Collector`` of its copy of the env."""
    with RayCollector(reset_cartpole(), TiltPolicy(), num_collectors=2, sync=True,
                      collector_kwargs={"num_envs": 1}, frames_per_batch=40, total_frames=-1) as collector:
        batch = next(iter(collector))
    assert batch.shape == (2, 20)
    assert not torch.equal(batch["observation"][0, 0], batch["observation"][1, 0])


def test_one_instance_is_one_env() -> None:
    with pytest.raises(ValueError, match="num_envs=2 with create_env_fn=.*one env"):
        Collector(gym.make("CartPole-v1"), None, frames_per_batch=8, num_envs=2)
    with pytest.raises(ValueError, match="num_envs_per_worker=2, but create_env_fn builds 1 env"):
        MultiSyncCollector(gym.make("CartPole-v1"), None, num_workers=2, num_envs_per_worker=2,
                           frames_per_batch=8)


def short_cartpole(max_episode_steps: int = 500) -> object:
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1", max_episode_steps=max_episode_steps)


def test_create_env_kwargs_with_an_env_already_built() -> None:
    """They reach a TorchRL batched env's sub-envs (not started yet), as in TorchRL's collectors;
    with any other env already built they are an error (they were ignored)."""
    pytest.importorskip("torchrl")
    from torchrl.envs import SerialEnv

    with Collector(SerialEnv(2, short_cartpole), None, frames_per_batch=20, total_frames=20,
                   create_env_kwargs={"max_episode_steps": 3}, seed=0) as collector:
        truncated = next(iter(collector))["next", "truncated"].reshape(2, 10)
    assert truncated[:, 2::3].all() and truncated.sum() == 6  # every third step: the limit reached
    vector = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    for env in (gym.make("CartPole-v1"), short_cartpole(), vector):
        with pytest.raises(TypeError, match="create_env_kwargs=.* an env already built"):
            Collector(env, None, frames_per_batch=8, create_env_kwargs={"max_episode_steps": 3})
