"""A recurrent policy in every native collector: told which envs start an episode (``is_init``),
its state carried per env from step to step, zeros at each episode's first step, and stored with
the batch, equal to a plain loop written here.

The reference loop steps each env by hand (reset env ``i`` with ``SEED + i``, reset in the same
step when an episode ends) and runs the same GRU on the stacked observations, zeroing the state of
the envs that start an episode. ``Collector``, ``MultiSyncCollector`` and a synchronous
``RayCollector`` give ``[4, T]`` batches; ``MultiAsyncCollector``, ``AsyncBatchedCollector`` (the
state held by its policy server, per env) and an asynchronous ``RayCollector`` one worker's two
envs at a time, compared with the reference's rows of those envs.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector, RayCollector
from tests.envs_for_tests import make_cartpole

pytestmark = pytest.mark.timeout(120)

SEED, T, BATCHES, HIDDEN = 5, 12, 4, 6


class GRUPolicy(TensorDictModuleBase):
    """A GRU cell over CartPole's observations, the action its state's sign: reads ``observation``,
    ``h`` and ``is_init``; writes ``action`` and the next state, under ``("next", "h")`` (TorchRL's
    recurrent modules' way) or under ``h`` itself. Makes its first state where ``h`` is missing."""

    def __init__(self, next_key: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.cell = torch.nn.GRUCell(4, HIDDEN)
        self.out_key: Any = ("next", "h") if next_key else "h"
        self.in_keys, self.out_keys = ["observation", "h", "is_init"], ["action", self.out_key]

    def step(self, obs: torch.Tensor, h: torch.Tensor, is_init: torch.Tensor) -> torch.Tensor:
        return self.cell(obs, torch.where(is_init, torch.zeros(()), h))

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        h = td.get("h", None)
        if h is None:
            h = torch.zeros(*td.batch_size, HIDDEN)
        h = self.step(td["observation"], h, td["is_init"])
        td.set(self.out_key, h)
        td.set("action", (h[..., 0] > 0).long())
        return td


def reference(num_envs: int, steps: int, next_key: bool = True) -> dict[str, np.ndarray]:
    """Each env's frames, ``[num_envs, steps, ...]``, from a loop written by hand."""
    policy = GRUPolicy(next_key)
    envs = [make_cartpole() for _ in range(num_envs)]
    obs = np.stack([env.reset(seed=SEED + i)[0] for i, env in enumerate(envs)])
    h, starts = torch.zeros(num_envs, HIDDEN), np.ones(num_envs, dtype=bool)
    rec: dict[str, list[Any]] = {k: [] for k in ("observation", "is_init", "h", "next_h", "action", "done")}
    with torch.inference_mode():
        for _ in range(steps):
            h_in = torch.where(torch.as_tensor(starts)[:, None], torch.zeros(()), h)
            h = policy.step(torch.as_tensor(obs), h, torch.as_tensor(starts)[:, None])
            actions = (h[:, 0] > 0).long().numpy()
            rec["observation"].append(obs.copy())
            rec["is_init"].append(starts.copy())
            rec["h"].append(h_in.numpy())
            rec["next_h"].append(h.numpy())
            rec["action"].append(actions)
            for i, env in enumerate(envs):
                next_obs, _, terminated, truncated, _ = env.step(int(actions[i]))
                starts[i] = terminated or truncated
                obs[i] = env.reset()[0] if starts[i] else next_obs
            rec["done"].append(starts.copy())
    return {k: np.stack(v, axis=1) for k, v in rec.items()}


def fields(batch: TensorDictBase, next_key: bool = True) -> dict[str, np.ndarray]:
    """The compared entries of a batch; state kept under one key is stored as written."""
    got = {"observation": batch["observation"].numpy(), "is_init": batch["is_init"][..., 0].numpy(),
           "action": batch["action"].numpy(), "done": batch["next", "done"][..., 0].numpy()}
    if next_key:
        got["h"], got["next_h"] = batch["h"].numpy(), batch["next", "h"].numpy()
    else:
        got["next_h"] = batch["h"].numpy()
    return got


def check(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rows: slice, steps: slice) -> None:
    for key, value in got.items():
        expected = want[key][rows, steps]
        if value.dtype.kind == "f":  # a batched matmul may round differently from the loop's
            np.testing.assert_allclose(value, expected, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(value, expected, err_msg=key)


def build(kind: str, next_key: bool = True) -> Any:
    rows = 4 if kind in ("single", "sync", "ray-sync") else 2
    frames = {"frames_per_batch": rows * T, "total_frames": 4 * T * BATCHES, "seed": SEED}
    policy = GRUPolicy(next_key)
    if kind == "single":
        return Collector(make_cartpole, policy, num_envs=4, **frames)
    if kind in ("sync", "async"):
        cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
        return cls(make_cartpole, policy, num_workers=2, num_envs_per_worker=2, **frames)
    if kind.startswith("batched"):  # batched-groups: each worker steps one env while the other is served
        groups = 2 if kind == "batched-groups" else 1
        return AsyncBatchedCollector(make_cartpole, policy, num_envs=4, envs_per_worker=2, env_groups=groups,
                                     **frames)
    return RayCollector(make_cartpole, policy, num_collectors=2, sync=kind == "ray-sync",
                        collector_kwargs={"num_envs": 2}, **frames)


def run_and_compare(kind: str, next_key: bool = True) -> None:
    with build(kind, next_key) as collector:
        batches = [batch.clone() for batch in collector]
    if kind in ("single", "sync", "ray-sync"):
        assert len(batches) == BATCHES
        want = reference(4, T * BATCHES, next_key)
        got = fields(torch.cat(batches, 1), next_key)
        check(got, want, slice(None), slice(None))
    else:  # one worker's 2 envs per batch: worker w's k-th batch holds envs 2w, 2w + 1, steps kT...
        assert len(batches) == 2 * BATCHES
        want = reference(4, T * 2 * BATCHES, next_key)
        seen = [0, 0]
        for batch in batches:
            worker = int(batch["collector", "traj_ids"][0, 0]) % 2
            k = seen[worker]
            seen[worker] += 1
            check(fields(batch, next_key), want, slice(2 * worker, 2 * worker + 2), slice(k * T, (k + 1) * T))
        assert min(seen) >= 2
    assert want["done"].sum() >= 4 and want["is_init"][:, 1:].any()  # episodes end within the run


@pytest.mark.parametrize("kind", ["single", "sync", "async", "batched", "batched-groups"])
def test_recurrent_policy_equals_a_plain_loop(kind: str) -> None:
    run_and_compare(kind)


@pytest.mark.parametrize("kind", ["single", "batched"])
def test_state_kept_under_its_own_key(kind: str) -> None:
    """State read and written under one key (``h``): the batch holds what each step wrote."""
    run_and_compare(kind, next_key=False)


@pytest.mark.parametrize("kind", ["ray-sync", "ray-async"])
def test_recurrent_policy_on_ray_equals_a_plain_loop(ray_session: None, kind: str) -> None:
    run_and_compare(kind)


def test_a_reset_starts_every_episode_again() -> None:
    """``collector.reset()`` resets every env: the next batch's first frame is each episode's first."""
    with Collector(make_cartpole, GRUPolicy(), num_envs=2, frames_per_batch=10, total_frames=-1,
                   seed=SEED) as collector:
        it = iter(collector)
        first = next(it).clone()
        assert first["is_init"][:, 0].all() and (first["h"][:, 0] == 0).all()
        second = next(it).clone()
        assert not second["is_init"][:, 0].any() and (second["h"][:, 0] != 0).any()
        collector.reset()
        third = next(it).clone()
    assert third["is_init"][:, 0].all() and (third["h"][:, 0] == 0).all()


def test_a_policy_reading_is_init_only() -> None:
    """``is_init`` without state: the policy sees which envs start an episode; the batch holds it."""

    class FirstStepLeft(TensorDictModuleBase):
        in_keys, out_keys = ["observation", "is_init"], ["action"]

        def forward(self, td: TensorDictBase) -> TensorDictBase:
            return td.set("action", (~td["is_init"][..., 0]).long())

    with Collector(make_cartpole, FirstStepLeft(), num_envs=3, frames_per_batch=60, total_frames=120,
                   seed=SEED) as collector:
        batch = torch.cat([b.clone() for b in collector], 1)
    is_init, done = batch["is_init"][..., 0], batch["next", "done"][..., 0]
    assert torch.equal(is_init[:, 1:], done[:, :-1]) and is_init[:, 0].all()
    assert torch.equal(batch["action"], (~is_init).long())
    assert done.any()


def test_state_dict_resumes_the_state() -> None:
    """A collector restored from ``state_dict()`` continues each env's state and episode starts."""
    kwargs: dict[str, Any] = {"num_envs": 2, "frames_per_batch": 16, "total_frames": -1, "seed": SEED}
    with Collector(make_cartpole, GRUPolicy(), **kwargs) as collector:
        it = iter(collector)
        next(it)
        state = collector.state_dict()
        want = next(it).clone()
    with Collector(make_cartpole, GRUPolicy(), **kwargs) as collector:
        collector.load_state_dict(state)
        got = next(iter(collector)).clone()
    assert (got.exclude(("collector", "traj_ids")) == want.exclude(("collector", "traj_ids"))).all()


def test_async_pool_resets_state_at_each_episode() -> None:
    """An asynchronous EnvPool hands back whichever envs are ready: per env, in frame order, the
    state is zeros where ``is_init`` and what the env's step before wrote elsewhere within an
    episode; ``is_init`` marks exactly each episode's first frame."""
    pytest.importorskip("envpool", reason="needs envpool: pip install rlcollect[envpool]")
    with Collector("envpool:CartPole-v1", GRUPolicy(), num_envs=4, create_env_kwargs={"batch_size": 2},
                   frames_per_batch=40, total_frames=160, seed=0) as collector:
        batches = [batch.clone() for batch in collector]
    flat = torch.cat([b.reshape(-1) for b in batches])
    for env in range(4):
        mine = flat[flat["collector", "env_ids"] == env]
        is_init, done = mine["is_init"][:, 0], mine["next", "done"][:, 0]
        assert is_init[0] and torch.equal(is_init[1:], done[:-1])
        assert (mine["h"][is_init] == 0).all()
        within = ~is_init[1:]
        assert torch.allclose(mine["h"][1:][within], mine["next", "h"][:-1][within])
    assert flat["next", "done"].any()


def test_gym_vector_env_too() -> None:
    """A Gymnasium vector env as the source: the same rule."""
    vec = gym.vector.SyncVectorEnv([make_cartpole for _ in range(2)])
    with Collector(vec, GRUPolicy(), frames_per_batch=80, total_frames=80, seed=SEED) as collector:
        batch = next(iter(collector)).clone()
    is_init, done = batch["is_init"][..., 0], batch["next", "done"][..., 0]
    assert torch.equal(is_init[:, 1:], done[:, :-1])
    assert (batch["h"][is_init] == 0).all() and done.any()
