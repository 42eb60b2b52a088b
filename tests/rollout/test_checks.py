"""The data checks: bad env or policy output is an error naming the env and step, in every collector.

Each case breaks one value at one known step (``BadEnv`` env 1 at its step ``AT``; ``LaterPolicy`` from
its call ``AT``), so the test knows exactly which env and step the error must name. Good data from
standard envs must pass untouched (the batches equal those collected with ``check="off"``).
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from tensordict.nn import TensorDictModule

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.data.batch_checks import BatchValueCheck
from rlcollect.data.checks import BadDataError, checked_array
from tests.envs_for_tests import CountingEnv, EnvBroke

pytestmark = pytest.mark.timeout(120)

AT = 5  # the env's step (1-based count) / the policy call at which the value goes bad


class BadEnv(gym.Env[np.ndarray, int]):
    """Box(4,) in [-10, 10], Discrete(2); at step ``AT`` of the env whose ``uid`` is ``bad_uid``,
    the field ``field`` of the step's result becomes ``value``."""

    observation_space = spaces.Box(-10, 10, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, field: str = "", value: Any = None, bad_uid: int = 1) -> None:
        self.field, self.value, self.bad_uid = field, value, bad_uid
        self.uid, self.count = -1, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if self.uid < 0 and seed is not None:
            self.uid = seed
        return np.full(4, 0.5, np.float32), {}

    def step(self, action: int) -> Any:
        self.count += 1
        result = {
            "obs": np.full(4, self.count % 7, np.float32),
            "reward": 1.0,
            "terminated": self.count % 9 == 0,
            "truncated": False,
        }
        if self.count == AT and self.uid == self.bad_uid:
            result[self.field] = self.value
        return result["obs"], result["reward"], result["terminated"], result["truncated"], {}


class LaterPolicy(torch.nn.Module):
    """Zeros for ``AT - 1`` calls, then ``bad(obs)``: the first call is the dry step at construction,
    so step ``AT - 2`` of the first batch is the first bad one."""

    def __init__(self, bad: Any) -> None:
        super().__init__()
        self.bad, self.calls = bad, 0

    def forward(self, obs: torch.Tensor) -> Any:
        self.calls += 1
        return self.bad(obs) if self.calls >= AT else torch.zeros(obs.shape[0], dtype=torch.int64)


ENV_CASES = {
    "obs shape (1,)": (
        "obs",
        np.zeros(1, np.float32),
        r"observation of env 1 at step 4 .*has shape \(1,\); the "
        r"space says \(4,\)",
    ),
    "obs scalar": ("obs", np.float32(1.0), r"observation of env 1 at step 4 .*has shape \(\)"),
    "obs None": ("obs", None, r"observation of env 1 at step 4 .*is NoneType None"),
    "obs str": ("obs", "1 2 3 4", r"observation of env 1 at step 4 .*is str"),
    "obs NaN": ("obs", np.full(4, np.nan, np.float32), r"observation of env 1 at step 4 .*nan.*not finite"),
    "obs out of bounds": (
        "obs",
        np.full(4, 11.0, np.float32),
        r"observation of env 1 at step 4 .*11\.0.*outside",
    ),
    "obs float64 beyond float32": (
        "obs",
        np.array([1e300, 0.0, 0.0, 0.0]),
        r"observation of env 1 at step 4 .*\[inf, 0.0, 0.0, 0.0\], not finite \(float32 holds magnitudes up "
        r"to 3.4e\+38: a float64 beyond that is stored as inf\)",
    ),
    # as many values as the space, in another shape: never broadcast, never reshaped
    "obs shape (1, 4)": (
        "obs", np.zeros((1, 4), np.float32), r"observation of env 1 at step 4 .*shape \(1, 4\)"),
    "obs shape (2, 2)": (
        "obs", np.zeros((2, 2), np.float32), r"observation of env 1 at step 4 .*shape \(2, 2\)"),
    "obs list of 3": ("obs", [1.0, 2.0, 3.0], r"observation of env 1 at step 4 .*has shape \(3,\)"),
    "reward str": ("reward", "1.0", r"reward of env 1 at step 4 .*is str '1.0'"),
    "reward None": ("reward", None, r"reward of env 1 at step 4 .*NoneType"),
    "reward NaN": ("reward", float("nan"), r"reward of env 1 at step 4 .*finite"),
    "reward inf": ("reward", float("inf"), r"reward of env 1 at step 4 .*finite"),
    "reward float64 beyond float32": (
        "reward", 1e300, r"reward of env 1 at step 4 .*is inf; .*float32, which holds .* up to 3.4e\+38"),
    "reward array of 2": ("reward", np.ones(2), r"reward of env 1 at step 4 .*real number"),
    "terminated 'no'": ("terminated", "no", r"terminated flag of env 1 at step 4 .*is str 'no'"),
    "terminated None": ("terminated", None, r"terminated flag of env 1 at step 4 .*NoneType"),
    "truncated 'no'": ("truncated", "no", r"truncated flag of env 1 at step 4 .*is str 'no'"),
    "truncated 2": ("truncated", 2, r"truncated flag of env 1 at step 4 .*int 2"),
    # falsy values that are not flags: never read as "not done" (a flag must be exactly a bool)
    "terminated ''": ("terminated", "", r"terminated flag of env 1 at step 4 .*is str ''"),
    "truncated 0.0": ("truncated", 0.0, r"truncated flag of env 1 at step 4 .*float 0.0"),
    "truncated []": ("truncated", [], r"truncated flag of env 1 at step 4 .*list \[\]"),
    "reward [1.0, 2.0] list": ("reward", [1.0, 2.0], r"reward of env 1 at step 4 .*real number"),
}
POLICY_CASES = {
    "action shape [1]": (
        lambda obs: torch.zeros(1, dtype=torch.int64),
        r"action at step 3 .*shape \[1\]; expected \[2\]",
    ),
    "action 1.7": (lambda obs: torch.full((obs.shape[0],), 1.7), r"action at step 3 .*float32.*truncated"),
    "action 7": (
        lambda obs: torch.full((obs.shape[0],), 7),
        r"action of env 0 at step 3 .*int 7, outside Discrete\(2\)",
    ),
    "action -3": (
        lambda obs: torch.full((obs.shape[0],), -3),
        r"action of env 0 at step 3 .*int -3, outside",
    ),
    "action numpy": (lambda obs: np.zeros(obs.shape[0], np.int64), r"action at step 3 .*is a ndarray"),
}


def single(env_fn: Any, policy: Any = None, **options: Any) -> Collector:
    return Collector(
        env_fn, policy, num_envs=2, frames_per_batch=2 * 8, total_frames=2 * 16, seed=0, **options
    )


@pytest.mark.parametrize("case", list(ENV_CASES))
def test_bad_env_value_is_an_error_naming_env_and_step(case: str) -> None:
    field, value, message = ENV_CASES[case]
    with pytest.raises(BadDataError, match=message) as raised:
        list(single(lambda: BadEnv(field, value)))
    assert (raised.value.env, raised.value.step, raised.value.batch) == (1, AT - 1, 0)


def test_a_reward_beyond_float32_is_the_error_alone() -> None:
    """The BadDataError explains the overflow: numpy's cast warning does not come before it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(BadDataError, match=r"reward of env 1 at step 4 .*is inf"):
            list(single(lambda: BadEnv("reward", 1e300)))


@pytest.mark.parametrize("case", list(POLICY_CASES))
def test_bad_policy_output_later_in_the_run_is_an_error(case: str) -> None:
    bad, message = POLICY_CASES[case]
    with pytest.raises(BadDataError, match=message):
        list(single(BadEnv, LaterPolicy(bad)))


def test_box_actions_may_leave_the_bounds_but_not_be_nan_or_infinite() -> None:
    """Unclipped Gaussian actions are stored as chosen (the env clips them); NaN, an infinite
    action and a float64 one that float32 would store as inf are refused."""

    def pendulum_policy(value: float) -> Any:
        calls = []

        def policy(obs: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            return torch.full((obs.shape[0], 1), value if len(calls) >= AT else 0.0)

        return policy

    batch = next(iter(Collector("Pendulum-v1", pendulum_policy(3.5), frames_per_batch=8, total_frames=8)))
    assert (
        batch["action"][0, AT - 2].item() == 3.5 and batch["action"][0, 0].item() == 0.0
    )  # 1st call: dry step
    with pytest.raises(BadDataError, match=r"action of env 0 at step 3 .*\[nan\], not finite"):
        list(Collector("Pendulum-v1", pendulum_policy(float("nan")), frames_per_batch=8, total_frames=8))
    for infinite in (float("inf"), -float("inf")):
        with pytest.raises(BadDataError, match=r"action of env 0 at step 3 .*\[-?inf\], not finite"):
            list(Collector("Pendulum-v1", pendulum_policy(infinite), frames_per_batch=8, total_frames=8))

    def float64_policy(obs: torch.Tensor) -> torch.Tensor:
        return torch.full((obs.shape[0], 1), 1e300, dtype=torch.float64)

    with pytest.raises(BadDataError, match=r"action of env 0 at step 0 .*\[inf\], not finite"):
        list(Collector("Pendulum-v1", float64_policy, frames_per_batch=8, total_frames=8))


class ByteActionEnv(BadEnv):
    """BadEnv with a ``Box(0, 255, (2,), uint8)`` action space (a key code, a pixel value)."""

    action_space = spaces.Box(0, 255, (2,), np.uint8)


@pytest.mark.parametrize("value", [300, -1, 256.0])
def test_integer_actions_their_dtype_cannot_hold_are_refused(value: float) -> None:
    """300 for a uint8 space would be stored and stepped as 44 (-1 as 255): an error naming the
    value and the range, in the process and from a policy server; 255 is stored as it is."""

    def policy(v: float) -> Any:  # zeros for AT - 1 calls (the dry step first), then v
        calls = []

        def act(obs: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            return torch.full((obs.shape[0], 2), v if len(calls) >= AT else 0)

        return act

    fits = next(iter(single(ByteActionEnv, policy(255))))
    assert fits["action"].dtype == torch.uint8 and fits["action"][:, AT - 2].tolist() == [[255, 255]] * 2
    message = rf"action at step 3 .*holds {value:g} .*stored as torch.uint8, which holds \[0, 255\]"
    with pytest.raises(BadDataError, match=message):
        list(single(ByteActionEnv, policy(value)))
    with pytest.raises(BadDataError, match=message.replace("at step 3 ", "")):
        list(AsyncBatchedCollector(ByteActionEnv, policy(value), num_envs=2, frames_per_batch=8,
                                   total_frames=16))


def test_check_levels() -> None:
    """``"batch"`` catches values (NaN) but lets a shape broadcast; ``"off"`` lets both through."""
    nan_env = lambda: BadEnv("obs", np.full(4, np.nan, np.float32))  # noqa: E731
    short_env = lambda: BadEnv("obs", np.full(1, 3.0, np.float32))  # noqa: E731
    with pytest.raises(BadDataError, match="nan"):
        list(single(nan_env, check="batch"))
    batches = list(single(short_env, check="batch"))
    assert torch.equal(batches[0]["next", "observation"][1, AT - 1], torch.full((4,), 3.0))  # broadcast
    assert torch.isnan(list(single(nan_env, check="off"))[0]["next", "observation"][1, AT - 1]).all()
    with pytest.raises(ValueError, match=r"check='some' is not one of \('full', 'batch', 'off'\)"):
        single(BadEnv, check="some")


@pytest.mark.parametrize(
    "make",
    [
        lambda: gym.make("CartPole-v1"),
        lambda: gym.make("Pendulum-v1"),
        lambda: gym.make("MountainCarContinuous-v0"),
        lambda: gym.make("FrozenLake-v1"),  # Discrete observations: Python ints
        lambda: gym.make("Acrobot-v1"),
    ],
    ids=["CartPole", "Pendulum", "MountainCarContinuous", "FrozenLake", "Acrobot"],
)
def test_good_data_passes_unchanged(make: Any) -> None:
    """Standard envs pass every check, and the checks change no value."""

    def run(check: str) -> list[Any]:
        return list(
            Collector(make, num_envs=3, frames_per_batch=3 * 50, total_frames=3 * 200, seed=1, check=check)
        )

    for checked, unchecked in zip(run("full"), run("off"), strict=True):
        assert (checked == unchecked).all()


def test_every_kind_of_real_reward_is_stored_as_its_value() -> None:
    """Rewards are written once per batch from what the envs returned: ints, numpy scalars,
    one-element arrays and bools are numbers; each lands as its value, in every check level."""
    kinds = [1, np.float32(2.5), np.array([3.0]), True, np.int64(4), 0.5, np.array(-1.5, np.float64)]

    class Rewards(BadEnv):
        def step(self, action: int) -> Any:
            obs, _, terminated, truncated, info = super().step(action)
            return obs, kinds[self.count % len(kinds)], terminated, truncated, info

    for check in ("full", "batch", "off"):
        batch = next(iter(Collector(Rewards, num_envs=2, frames_per_batch=2 * 14, seed=0, check=check)))
        expected = [float(np.asarray(kinds[(t + 1) % len(kinds)]).item()) for t in range(14)]
        assert batch["next", "reward"].dtype == torch.float32
        assert batch["next", "reward"][..., 0].tolist() == [expected, expected]


def test_dict_observations_are_checked_per_entry() -> None:
    class DictEnv(BadEnv):
        observation_space = spaces.Dict(
            {"pos": spaces.Box(-1, 1, (2,), np.float32), "id": spaces.Discrete(3)}
        )

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            super().reset(seed=seed)
            return {"pos": np.zeros(2, np.float32), "id": 0}, {}

        def step(self, action: int) -> Any:
            _, reward, terminated, truncated, info = super().step(action)
            bad = self.count == AT and self.uid == 1
            return (
                {"pos": np.zeros(1 if bad else 2, np.float32), "id": 1},
                reward,
                terminated,
                truncated,
                info,
            )

    with pytest.raises(BadDataError, match=r"observation pos of env 1 at step 4 .*shape \(1,\)"):
        policy = TensorDictModule(
            lambda pos: torch.zeros(pos.shape[0], dtype=torch.int64), ["pos"], ["action"]
        )
        list(single(DictEnv, policy))


@pytest.mark.parametrize("kind", ["sync", "async", "batched"])
def test_workers_name_the_collector_wide_env(kind: str) -> None:
    """Env 3 is worker 1's second env: the error, raised here, names env 3."""
    env = lambda: BadEnv("reward", "1.0", bad_uid=3)  # noqa: E731
    rows = 4 if kind == "sync" else 2  # each batch holds T = 8 steps
    common = {
        "frames_per_batch": rows * 8,
        "total_frames": 64,
        "seed": 0,
        "start_method": "forkserver",  # fresh workers that unpickle the env, as spawn
        "max_worker_restarts": 0,
    }
    policy = lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64)  # noqa: E731
    if kind == "batched":
        collector: Any = AsyncBatchedCollector(env, policy, num_envs=4, envs_per_worker=2, **common)
    else:
        cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
        collector = cls([env, env], policy, num_envs_per_worker=2, **common)
    with collector, pytest.raises(BadDataError, match=r"reward of env 3 at step 4 .*str '1.0'"):
        list(collector)


def test_batched_server_checks_the_policy_output() -> None:
    """One action too many, whichever envs a forward pass serves (a fixed shape of 1 would be right
    for a pass that happens to serve one env: under load every pass may)."""
    policy = LaterPolicy(lambda obs: torch.zeros(obs.shape[0] + 1, dtype=torch.int64))
    with (
        AsyncBatchedCollector(
            BadEnv,
            policy,
            num_envs=2,
            envs_per_worker=1,
            frames_per_batch=8,
            total_frames=64,
            start_method="forkserver",
        ) as collector,
        pytest.raises(BadDataError, match=r"action has shape \[[23]\]; expected \[[12]\]"),
    ):
        list(collector)


def test_vector_env_that_ignores_reset_mask_takes_its_own_resets() -> None:
    """A NEXT_STEP env whose reset() resets everything is stepped through its own resets (masked,
    tests/envs/test_next_step.py); one whose partial resets work is reset at once, unmasked."""
    venv = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point")
    with Collector(venv, frames_per_batch=300, total_frames=300, seed=0) as collector:
        batch = next(iter(collector))
    assert not batch["collector", "mask"].all()
    sync = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    batch = next(iter(Collector(sync, frames_per_batch=30, total_frames=30)))
    assert batch.batch_size == (3, 10) and ("collector", "mask") not in batch.keys(True)


def test_vector_env_with_wrong_batched_shapes_is_an_error() -> None:
    class ShortVector(gym.vector.SyncVectorEnv):
        def step(self, actions: Any) -> Any:
            obs, reward, terminated, truncated, info = super().step(actions)
            return obs, reward[:1], terminated, truncated, info

    venv = ShortVector([lambda: gym.make("CartPole-v1")] * 2)
    with pytest.raises(
        BadDataError, match=r"vector env's reward at step 0 .*shape \(1,\); the space says \(2,\)"
    ):
        list(Collector(venv, frames_per_batch=8, total_frames=8))


def test_checked_array_refuses_what_a_cast_would_hide() -> None:
    uint8 = np.dtype(np.uint8)
    assert checked_array(np.array([1.0, 2.0]), (2,), uint8, "x", env=0, step=0).tolist() == [1.0, 2.0]
    with pytest.raises(BadDataError, match="non-integer"):
        checked_array(np.array([1.7, 2.0]), (2,), uint8, "x", env=0, step=0)
    with pytest.raises(BadDataError, match="cannot hold"):
        checked_array(np.array([300, 2]), (2,), uint8, "x", env=0, step=0)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # numpy's, on 1e300
def test_infinite_observations_are_an_error_even_in_an_unbounded_box() -> None:
    """An unbounded float64 Box collected with ``obs_dtype="float32"``: 1e300 is stored as inf,
    which the space allows; the batch check refuses it, as any infinite observation (single envs
    and a vector env alike); kept as float64, 1e300 is stored as it is."""

    class Huge(gym.Env[np.ndarray, int]):
        observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
        action_space = spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            self.t = 0
            return np.zeros(2), {}

        def step(self, action: int) -> Any:
            self.t += 1
            return np.array([1e300 if self.t == 3 else 1.0, 0.0]), 0.0, False, False, {}

    message = r"observation of env 0 at step 2 .*\[inf, 0.0\], not finite \(float32 holds"
    with pytest.raises(BadDataError, match=message):
        list(Collector(Huge, frames_per_batch=8, total_frames=8, obs_dtype="float32"))
    vector = gym.vector.SyncVectorEnv([Huge, Huge])
    with pytest.raises(BadDataError, match=message):
        list(Collector(vector, frames_per_batch=8, total_frames=8, obs_dtype="float32"))
    with pytest.raises(BadDataError, match=r"observation of env 0 at step 2 .*\[inf, 0.0\], not finite$"):
        list(Collector(lambda: gym.wrappers.TransformObservation(  # an inf the env returns itself
            Huge(), lambda obs: np.where(obs > 1.0, np.inf, obs), Huge.observation_space),
            frames_per_batch=8, total_frames=8))
    batch = Collector(Huge, frames_per_batch=8, total_frames=8).next()  # float64 kept: stored as is
    assert batch["next", "observation"][0, 2, 0].item() == 1e300


def test_batch_value_check_finds_the_first_bad_frame() -> None:
    from rlcollect.data.buffers import BatchBuffers
    from rlcollect.data.layout import BatchLayout, action_fields, observation_fields

    obs_space, action_space = spaces.Box(0, 1, (3,), np.float32), spaces.MultiDiscrete([2, 3])
    layout = BatchLayout(tuple(observation_fields(obs_space)), action_fields(action_space)[0])
    buffers = BatchBuffers.allocate(layout, num_envs=2, num_steps=4)
    check = BatchValueCheck(obs_space, action_space, layout.observations, layout.action)
    check(buffers, 4)
    buffers.action_np[1, 2] = [1, 3]
    with pytest.raises(
        BadDataError, match=r"action of env 1 at step 2 is \[1, 3\], outside MultiDiscrete"
    ):
        check(buffers, 4)
    buffers.action_np[1, 2] = [1, 2]
    buffers.obs_ext_np[("observation",)][0, 3, 1] = 2.0  # env 0's reset observation after step 2
    buffers.done_np[0, 2] = True
    with pytest.raises(BadDataError, match=r"reset observation of env 0 at step 2 is \[0.0, 2.0, 0.0\]"):
        check(buffers, 4)
    # several bad values: the earliest is named (the cause of those after it), whatever its field
    buffers.reward_np[1, 1] = np.nan  # env 1, step 1: before the reset observation of step 2
    with pytest.raises(BadDataError, match=r"reward of env 1 at step 1 is nan"):
        check(buffers, 4)
    buffers.next_obs_np[("observation",)][0, 1] = np.nan  # step 1's true final observation of env 0
    buffers.done_np[0, 1] = True
    with pytest.raises(BadDataError, match=r"observation of env 0 at step 1 is \[nan, nan, nan\]"):
        check(buffers, 4)  # what step 1 returned: its observation before its reward (the same step)
    buffers.action_np[1, 1] = [2, 0]
    with pytest.raises(BadDataError, match=r"action of env 1 at step 1 is \[2, 0\]"):
        check(buffers, 4)  # the action of step 1, before what step 1 returned
    buffers.obs_ext_np[("observation",)][1, 0] = -1.0
    with pytest.raises(BadDataError, match=r"observation of env 1 at step 0 is \[-1.0, -1.0, -1.0\]"):
        check(buffers, 4)  # the batch's first observation, before every action


def test_bounds_with_an_element_each_are_tested_as_elementwise_comparison_does() -> None:
    """The column-wise bounds test (CartPole's space: position and angle bounded, velocities
    not) against the plain elementwise comparison, on values inside, outside in one element
    only, below one bound but above every other, NaN and inf."""
    from rlcollect.data.batch_checks import _inside, _Range

    big = np.finfo(np.float32).max
    low = np.array([-4.8, -big, -0.42, -big], np.float32)
    high = -low
    bounds = _Range(low, high)
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((64, 9, 4)) * [1.0, 3.0, 0.1, 3.0]).astype(np.float32)
    cases = {"inside": values}
    for element, value in ((0, 5.0), (0, -5.0), (2, 0.5), (2, -0.43), (1, np.inf), (3, -np.inf),
                           (1, np.nan), (2, np.nan)):
        changed = values.copy()
        changed[17, 3, element] = value
        cases[f"element {element} = {value}"] = changed
    for name, case in cases.items():
        expected = bool(((case >= low) & (case <= high)).all())
        assert _inside(case, bounds) == expected, name
        part = case[:, :5]  # not contiguous
        assert _inside(part, bounds) == bool(((part >= low) & (part <= high)).all()), name
    assert _inside(values, bounds) and not _inside(cases["element 2 = 0.5"], bounds)


def test_gym_vector_env_probe_is_undone_by_the_first_reset() -> None:
    """The partial-reset probe steps the env once; seeded collection still equals separate envs'."""

    def first(source: Any, **options: Any) -> Any:
        return next(iter(Collector(source, frames_per_batch=20, total_frames=20, seed=4, **options)))

    probed = first(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"))
    reference = first("CartPole-v1", num_envs=2)
    assert torch.equal(probed["observation"], reference["observation"])


@pytest.mark.filterwarnings("error::DeprecationWarning")  # numpy 2's for np.array(tensor) at an episode end
def test_an_env_written_in_torch_gives_the_batch_of_its_numpy_twin() -> None:
    """Tensors for the observation, the reward and one-value bool tensors for the flags (an env
    written in torch) are read as their numpy values; a two-value flag is still an error."""

    class Steps(gym.Env[np.ndarray, int]):
        observation_space = spaces.Box(-10, 10, (3,), np.float32)
        action_space = spaces.Discrete(2)

        def __init__(self, as_tensors: bool, flag_size: int = 1, as_arrays: bool = False) -> None:
            self.as_tensors, self.flag_size, self.as_arrays = as_tensors, flag_size, as_arrays

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            self.t = 0
            return self._out(np.zeros(3, np.float32)), {}

        def step(self, action: int) -> Any:
            self.t += 1
            obs, reward = np.full(3, self.t % 5, np.float32), float(action) + 0.5
            terminated = self.t % 7 == 0
            if self.as_arrays:  # numpy one-value arrays: shape (1,), as some numpy envs compute them
                flags = np.full((self.flag_size,), terminated), np.zeros(1, bool)
                return obs, np.full(1, reward), *flags, {}
            if not self.as_tensors:
                return obs, reward, terminated, False, {}
            flag = torch.full((self.flag_size,), terminated)
            return self._out(obs), torch.tensor(reward), flag, torch.tensor(False), {}

        def _out(self, obs: np.ndarray) -> Any:
            return torch.as_tensor(obs) if self.as_tensors else obs

    def batch(as_tensors: bool, as_arrays: bool = False) -> Any:
        collector = Collector(lambda: Steps(as_tensors, as_arrays=as_arrays),
                              lambda obs: (obs[:, 0] > 1).long(), num_envs=2, frames_per_batch=32,
                              total_frames=32)
        return collector.next()

    torch_batch, numpy_batch, arrays_batch = batch(True), batch(False), batch(False, as_arrays=True)
    assert numpy_batch["next", "terminated"].sum() == 4  # steps 7 and 14 of both envs
    for key in numpy_batch.keys(True, True):
        assert torch.equal(torch_batch[key], numpy_batch[key]), key
        assert torch.equal(arrays_batch[key], numpy_batch[key]), key
    with pytest.raises(BadDataError, match=r"terminated flag of env 0 at step 0 .*Tensor"):
        list(Collector(lambda: Steps(True, flag_size=2), frames_per_batch=8, total_frames=8))
    with pytest.raises(BadDataError, match=r"terminated flag of env 0 at step 0 .*ndarray"):
        list(Collector(lambda: Steps(False, flag_size=2, as_arrays=True), frames_per_batch=8, total_frames=8))


class _LogProbLater(torch.nn.Module):
    """A Discrete action, masked logits (-inf: meant) and a log-probability that turns NaN from
    call ``AT`` on (the dry step at construction is call 1), for every env but the first."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self.calls += 1
        n = observation.shape[0]
        log_prob = torch.zeros(n)
        if self.calls >= AT:
            log_prob[1:] = float("nan")
        logits = torch.tensor([0.0, -float("inf")]).expand(n, 2)
        return torch.zeros(n, dtype=torch.int64), logits, log_prob


@pytest.mark.parametrize("kind", [Collector, MultiSyncCollector, AsyncBatchedCollector])
def test_nan_in_what_a_tensordict_policy_writes_beside_the_action_is_an_error(kind: type) -> None:
    policy = TensorDictModule(_LogProbLater(), in_keys=["observation"],
                              out_keys=["action", "logits", "action_log_prob"])
    fine = TensorDictModule(lambda obs: (torch.zeros(obs.shape[0], dtype=torch.int64),
                                         torch.tensor([0.0, -float("inf")]).expand(obs.shape[0], 2)),
                            in_keys=["observation"], out_keys=["action", "logits"])

    def build(policy: Any) -> Any:
        if kind is Collector:
            return single(BadEnv, policy)
        # two workers of two envs (one server over all four); a failure is not retried
        common = {"frames_per_batch": 4 * 8, "total_frames": 4 * 16, "seed": 0, "max_worker_restarts": 0}
        if kind is AsyncBatchedCollector:
            return kind(BadEnv, policy, num_envs=4, envs_per_worker=2, **common)
        return kind([BadEnv, BadEnv], policy, num_envs_per_worker=2, **common)

    with build(fine) as collector:
        batch = collector.next()
    assert torch.isinf(batch["logits"][..., 1]).all()  # masked logits are stored as written
    message = r"policy output action_log_prob of env [1-3] at step \d .*holds NaN: float nan"
    with build(policy) as collector, pytest.raises(BadDataError, match=message):
        list(collector)


class _Constant(torch.nn.Module):
    def __init__(self, action: int) -> None:
        super().__init__()
        self.action = action

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.full((obs.shape[0],), self.action, dtype=torch.int64)


def _steps_then_acts(action: int, start: int) -> Any:
    """A policy giving action 0 for ``start`` steps, then ``action``: the bad one comes mid-batch."""
    calls = {"n": 0}

    def policy(obs: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return torch.full((obs.shape[0],), 0 if calls["n"] <= start else action, dtype=torch.int64)

    return policy


def test_an_action_outside_the_space_that_the_env_refuses_is_named_as_the_policys() -> None:
    """CartPole asserts on action -1 (``AssertionError: -1 (<class 'int'>) invalid``): the error
    names the action, the env and the step instead, with the env's error as its cause."""
    collector = Collector("CartPole-v1", _steps_then_acts(-1, start=4), num_envs=2, frames_per_batch=20)
    with pytest.raises(BadDataError, match=r"the action of env 0 at step 3 of batch 0 is int -1, "
                                           r"outside Discrete\(2\)") as caught:
        collector.next()  # the dry step at construction is call 1: steps 0-2 act 0, step 3 acts -1
    assert isinstance(caught.value.__cause__, AssertionError)
    with pytest.raises(AssertionError, match="invalid"):  # without the checks, the env's own error
        Collector("CartPole-v1", _Constant(-1), num_envs=2, frames_per_batch=20, check="off").next()


def test_a_policy_error_and_an_env_error_with_valid_actions_go_through_as_they_are() -> None:
    def failing(obs: torch.Tensor) -> torch.Tensor:
        raise KeyError("the policy's own bug")

    with pytest.raises(KeyError, match="the policy's own bug"):
        Collector("CartPole-v1", failing, num_envs=2, frames_per_batch=20)
    env = CountingEnv(fail_at=2)
    with pytest.raises(EnvBroke, match="broke at step 2"):
        Collector(env, _Constant(1), frames_per_batch=8).next()
