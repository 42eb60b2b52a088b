"""``info_keys``: the envs' step infos in the batch, at ``("next", "info", key)``, as a hand-written
loop reads them: each step's own values (at an episode's end the final step's, never the reset's),
in the dtype and shape the env returned; a missing key or a value that does not fit is an error.
Every collector gives the same values (``tests/collectors/test_parity.py``, case ``info_keys``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect import Collector, MultiSyncCollector
from rlcollect.data.checks import BadDataError
from tests.envs_for_tests import TiltPolicy, make_cartpole_info

pytestmark = pytest.mark.timeout(120)

KEYS = ["x", "steps", "upright", "pair"]
SEED, ENVS, T = 5, 2, 60


def plain_loop() -> dict[str, np.ndarray]:
    """The infos of ``ENVS`` envs stepped by hand with :class:`TiltPolicy` for ``T`` steps, env ``i``
    first reset with ``SEED + i`` and reset at once where an episode ends."""
    policy = TiltPolicy()
    envs = [make_cartpole_info() for _ in range(ENVS)]
    obs = [env.reset(seed=SEED + i)[0] for i, env in enumerate(envs)]
    kept: dict[str, list[list[Any]]] = {key: [[] for _ in envs] for key in [*KEYS, "done"]}
    for _ in range(T):
        for i, env in enumerate(envs):
            with torch.no_grad():
                action = int(policy(torch.as_tensor(obs[i])[None])[0])
            obs[i], _, terminated, truncated, info = env.step(action)
            for key in KEYS:
                kept[key][i].append(info[key])
            kept["done"][i].append(terminated or truncated)
            if terminated or truncated:
                obs[i], _ = env.reset()
    return {key: np.array(rows) for key, rows in kept.items()}


def collect(source: Any = make_cartpole_info, **options: Any) -> Any:
    with Collector(source, TiltPolicy(), num_envs=ENVS if source is make_cartpole_info else 1,
                   frames_per_batch=ENVS * T, total_frames=ENVS * T, seed=SEED, **options) as collector:
        return collector.next()


def test_each_frame_holds_its_steps_info_as_a_plain_loop_reads_it() -> None:
    batch, expected = collect(info_keys=KEYS), plain_loop()
    assert expected["done"].any()  # episodes end inside the batch: the final step's info is kept
    infos = batch["next", "info"]
    assert {key: (infos[key].dtype, tuple(infos[key].shape)) for key in KEYS} == {
        "x": (torch.float32, (ENVS, T)), "steps": (torch.int64, (ENVS, T)),
        "upright": (torch.bool, (ENVS, T)), "pair": (torch.float64, (ENVS, T, 2))}
    for key in KEYS:
        assert np.array_equal(infos[key].numpy(), expected[key]), key
    assert np.array_equal(batch["next", "done"][..., 0].numpy(), expected["done"])


def test_the_layout_step_changes_no_frame() -> None:
    """The first env takes one step to lay the infos out; the seeded reset after it starts the
    batch as it would have started without ``info_keys``."""
    with_infos, without = collect(info_keys=KEYS), collect()
    assert (with_infos.exclude(("next", "info")) == without).all()


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP])
def test_a_vector_env_gives_the_same_infos(mode: gym.vector.AutoresetMode) -> None:
    """``SAME_STEP``: an ended sub-env's values come from ``info["final_info"]`` (its reset info,
    where they are not, is not stored); ``NEXT_STEP``: the step's info, before the collector's
    partial reset."""
    def vector() -> gym.vector.SyncVectorEnv:
        return gym.vector.SyncVectorEnv([make_cartpole_info] * ENVS, autoreset_mode=mode)

    batch = collect(vector, info_keys=KEYS)
    reference = collect(info_keys=KEYS)
    assert (batch == reference).all()


def test_a_synchronous_envpool_gives_its_infos() -> None:
    """The pool the collector built is rebuilt after the layout step (EnvPool reseeds only so):
    the other entries are those of the same collector without ``info_keys``."""
    pytest.importorskip("envpool")
    batches = []
    for keys in (["elapsed_step"], None):
        with Collector("envpool:CartPole-v1", num_envs=2, frames_per_batch=2 * 40, total_frames=80, seed=0,
                       info_keys=keys) as collector:
            batches.append(collector.next())
    batch = batches[0]
    assert (batch.exclude(("next", "info")) == batches[1]).all()
    elapsed, done = batch["next", "info", "elapsed_step"], batch["next", "done"][..., 0]
    assert elapsed.dtype == torch.int32 and done.any()
    count = torch.zeros(2, dtype=torch.int32)  # the episode's steps, counted from the done flags
    for t in range(40):
        count += 1
        assert torch.equal(elapsed[:, t], count)
        count[done[:, t]] = 0


class ChangingInfo(gym.Env[np.ndarray, int]):
    """Its step info is ``{"score": 1.5}`` up to step ``after``, then ``later``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, later: dict[str, Any], first: dict[str, Any] | None = None, after: int = 2) -> None:
        self.later, self.first, self.after = later, first or {"score": 1.5}, after

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, False, self.first if self.t <= self.after else self.later


@pytest.mark.parametrize(("later", "message"), [
    ({}, r"the info\['score'\] of env 0 at step 2 of batch 0 is missing: the step's info has keys \[\]"),
    ({"score": "high"}, r"info\['score'\] of env 0 at step 2 .* is str 'high'"),
    ({"score": np.ones(2)},
     r"info\['score'\] of env 0 at step 2 .* has shape \(2,\); the first step's had \(\)"),
])
def test_a_later_step_whose_info_does_not_fit_is_bad_data(later: dict[str, Any], message: str) -> None:
    make = lambda: ChangingInfo(later)  # noqa: E731
    with Collector(make, frames_per_batch=6, total_frames=6, info_keys=["score"]) as c, \
            pytest.raises(BadDataError, match=message):
        c.next()


def test_a_value_the_first_steps_dtype_does_not_hold_is_bad_data() -> None:
    make = lambda: ChangingInfo({"lives": 2.5}, first={"lives": 3})  # noqa: E731
    with Collector(make, frames_per_batch=6, total_frames=6, info_keys=["lives"]) as c, \
            pytest.raises(BadDataError, match=r"is float64 2.5; the first step's was int64, which does not"):
        c.next()
    ints_in_floats = lambda: ChangingInfo({"score": 2}, first={"score": 1.5})  # noqa: E731
    with Collector(ints_in_floats, frames_per_batch=6, total_frames=6, info_keys=["score"]) as c:
        assert c.next()["next", "info", "score"].tolist() == [[1.5, 1.5, 2.0, 2.0, 2.0, 2.0]]


def test_a_worker_names_the_env_and_the_step() -> None:
    with MultiSyncCollector(lambda: ChangingInfo({}), num_workers=2, frames_per_batch=8, total_frames=8,
                            info_keys=["score"], max_worker_restarts=0) as c, \
            pytest.raises(Exception, match=r"info\['score'\] of env [01] at step 2 .* is missing"):
        c.next()


@pytest.mark.parametrize(("keys", "error", "message"), [
    ("score", TypeError, r"info_keys='score' must be a list of the info's key names"),
    (["score", "score"], ValueError, r"names a key twice"),
    ([3], TypeError, r"must be a list of the info's key names"),
    (["bonus"], ValueError, r"info_keys=\['bonus'\]: \['bonus'\] not in the info the first env at its first "
                            r"step returned \(its keys: \['score'\]\)"),
])
def test_bad_info_keys_are_named(keys: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Collector(lambda: ChangingInfo({}), frames_per_batch=4, info_keys=keys)


def test_a_value_that_is_not_a_number_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match=r"info_keys: info\['name'\] is 'pong' \(str\) from the first env"):
        Collector(lambda: ChangingInfo({}, first={"name": "pong"}), frames_per_batch=4, info_keys=["name"])


def test_env_kinds_without_gymnasium_infos_are_refused() -> None:
    torchrl_envs = pytest.importorskip("torchrl.envs")
    with pytest.raises(TypeError, match="info_dict_reader"):
        Collector(lambda: torchrl_envs.GymEnv("CartPole-v1").set_info_dict_reader(), frames_per_batch=4,
                  info_keys=["x"])
    pytest.importorskip("envpool")
    with pytest.raises(TypeError, match="asynchronous EnvPool"):
        Collector("envpool:CartPole-v1", num_envs=4, frames_per_batch=8, info_keys=["elapsed_step"],
                  create_env_kwargs={"batch_size": 2})
