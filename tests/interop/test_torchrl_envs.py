"""A TorchRL env is accepted by every collector, and gives what TorchRL's own collector gives."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")
# these envs lack the policy's transforms on purpose: rlcollect warns as TorchRL 0.14 does
pytestmark = pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs:FutureWarning")

from tensordict import NestedKey, TensorDictBase  # noqa: E402
from tensordict.nn import TensorDictModule, TensorDictModuleBase  # noqa: E402
from torchrl.collectors import Collector as TorchRLCollector  # noqa: E402
from torchrl.collectors import MultiSyncCollector as TorchRLMultiSync  # noqa: E402
from torchrl.envs import EnvBase, GymEnv, ParallelEnv, SerialEnv, StepCounter, TransformedEnv  # noqa: E402
from torchrl.modules import RandomPolicy  # noqa: E402

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector  # noqa: E402
from rlcollect.data.checks import BadDataError  # noqa: E402
from rlcollect.envs.factory import make_env_batch  # noqa: E402
from rlcollect.envs.torchrl_gym import TorchRLGymEnvs, TorchRLGymVector  # noqa: E402
from rlcollect.envs.torchrl_stepped import TorchRLEnv  # noqa: E402
from rlcollect.torchrl import Collector as TorchRLLayoutCollector  # noqa: E402
from rlcollect.torchrl import MultiSyncCollector as TorchRLLayoutMultiSync  # noqa: E402
from tests.envs_for_tests import TiltPolicy, tilt_module  # noqa: E402


def make_env() -> TransformedEnv:
    return TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter(40))


def policy() -> TensorDictModule:
    return tilt_module()


def one_hot_policy() -> TensorDictModule:
    return TensorDictModule(lambda obs: torch.nn.functional.one_hot(TiltPolicy()(obs), 2),
                            in_keys=["observation"], out_keys=["action"])


def assert_same_frames(env: Callable[[], EnvBase], policy: Callable[[], Any], frames: int, batched: bool,
                       keys: Sequence[NestedKey] = ()) -> None:
    """Three batches from TorchRL's collector and from ours, same envs seeded alike: equal."""
    seeded = env()
    seeded.set_seed(3)  # before the collector's first reset, as ours does with seed=3
    theirs = TorchRLCollector(seeded, policy(), frames_per_batch=frames, total_frames=3 * frames)
    torch.manual_seed(0)  # for policies that draw from torch's generator
    expected = [b.clone() for b in theirs]
    theirs.shutdown()
    ours = Collector(env(), policy(), frames_per_batch=frames, total_frames=3 * frames, seed=3)
    torch.manual_seed(0)
    got = list(ours)
    for want, have in zip(expected, got, strict=True):
        assert have is not None
        want = want if batched else want.unsqueeze(0)
        for key in ["observation", "action", ("next", "observation"), ("next", "reward"),
                    ("next", "terminated"), ("next", "truncated"), ("next", "done"), *keys]:
            assert have[key].dtype == want[key].dtype, key
            assert torch.equal(have[key], want[key].reshape(have[key].shape)), key
    done = torch.cat(got, 1)["next", "done"]  # type: ignore[arg-type]
    assert done.any()


@pytest.mark.parametrize("batched", [False, True])
def test_same_frames_as_torchrl_collector(batched: bool) -> None:
    def env() -> EnvBase:
        return SerialEnv(2, make_env) if batched else make_env()

    assert_same_frames(env, policy, 80 if batched else 40, batched)


@pytest.mark.parametrize("batched", [False, True])
def test_one_hot_actions_as_torchrl_collector(batched: bool) -> None:
    """GymEnv's default action spec is one-hot: the batch holds one-hot int64 actions."""
    def one_hot_env() -> EnvBase:
        return TransformedEnv(GymEnv("CartPole-v1"), StepCounter(40))

    def env() -> EnvBase:
        return SerialEnv(2, one_hot_env) if batched else one_hot_env()

    assert_same_frames(env, one_hot_policy, 80 if batched else 40, batched)


@pytest.mark.parametrize("batched", [False, True])
def test_torchrl_random_policy_on_several_observation_keys(batched: bool) -> None:
    """TorchRL's RandomPolicy writes into the TensorDict it is given (the env's own batch size:
    ``[]`` for an unbatched env); observation and step_count both reach the batch."""
    def env() -> EnvBase:
        return SerialEnv(2, make_env) if batched else make_env()

    spec = env().action_spec
    assert_same_frames(env, lambda: RandomPolicy(spec), 80 if batched else 40, batched, keys=["step_count"])
    assert_same_frames(env, RandomPolicy, 80 if batched else 40, batched)  # the spec from the env


@pytest.mark.parametrize("batched", [False, True])
def test_torchrl_layout_is_torchrl_collectors(batched: bool) -> None:
    """rlcollect.torchrl's Collector: TorchRL's layout, key for key and value for value ([T] for
    an unbatched env, root done flags, ("next", "policy_version") with track_policy_version)."""
    def env() -> EnvBase:
        return SerialEnv(2, make_env) if batched else make_env()

    frames, track = (80, False) if batched else (40, True)  # TorchRL tracks versions of unbatched envs only
    seeded = env()
    seeded.set_seed(3)
    theirs = TorchRLCollector(seeded, policy(), frames_per_batch=frames, total_frames=2 * frames,
                              track_policy_version=track)
    expected = [b.clone() for b in theirs]
    theirs.shutdown()
    with TorchRLLayoutCollector(env(), policy(), frames_per_batch=frames, total_frames=2 * frames, seed=3,
                                track_policy_version=track) as ours:
        got = [b.clone() for b in ours]
        assert ours.get_policy_version() == (0 if track else None)
    for want, have in zip(expected, got, strict=True):
        assert have.batch_size == want.batch_size
        assert set(have.keys(True, True)) == set(want.keys(True, True))
        for key in want.keys(True, True):
            if key in (("collector", "traj_ids"), "policy_version", ("next", "policy_version")):
                continue  # TorchRL's own numbering; its versions are its PolicyVersion's (UUIDs)
            assert have[key].dtype == want[key].dtype, key
            assert torch.equal(have[key], want[key]), key
        assert not have["done"].any()
        if track:
            assert torch.equal(have["next", "policy_version"], have["policy_version"])
    with TorchRLLayoutCollector(env(), policy(), frames_per_batch=frames, total_frames=frames) as untracked:
        batch = next(iter(untracked))
        assert untracked.get_policy_version() is None
    assert "policy_version" not in batch and ("next", "policy_version") not in batch.keys(True)


@pytest.mark.parametrize("batched", [False, True])
def test_max_frames_per_traj_counts_steps_as_torchrl(batched: bool) -> None:
    """TorchRL's collectors append a StepCounter for max_frames_per_traj: the same step_count and
    truncations, key for key and value for value."""
    def env() -> EnvBase:
        plain = partial(GymEnv, "CartPole-v1", categorical_action_encoding=True)
        return SerialEnv(2, plain) if batched else plain()

    frames = 60 if batched else 30
    seeded = env()
    seeded.set_seed(3)
    theirs = TorchRLCollector(seeded, policy(), frames_per_batch=frames, total_frames=2 * frames,
                              max_frames_per_traj=7)
    expected = [b.clone() for b in theirs]
    theirs.shutdown()
    with TorchRLLayoutCollector(env(), policy(), frames_per_batch=frames, total_frames=2 * frames, seed=3,
                                max_frames_per_traj=7) as ours:
        got = [b.clone() for b in ours]
    for want, have in zip(expected, got, strict=True):
        assert set(have.keys(True, True)) == set(want.keys(True, True))
        for key in want.keys(True, True):
            if key != ("collector", "traj_ids"):
                assert torch.equal(have[key], want[key]), key
        assert have["next", "truncated"].any() and have["next", "step_count"].max() == 7
    with pytest.raises(ValueError, match=r"max_frames_per_traj=7 with a TorchRL env that already counts "
                                         r"steps \(its 'step_count' entry"):
        Collector(make_env(), policy(), frames_per_batch=8, max_frames_per_traj=7)


class _HybridActions(gym.Env):
    """A Dict action (a discrete kind and a continuous force), as the native collectors refuse it;
    its reward is the kind plus the force's sum, so the batch shows what the env was sent."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Dict(kind=gym.spaces.Discrete(3),
                                   force=gym.spaces.Box(-1.0, 1.0, (2,), np.float32))

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> Any:
        assert isinstance(action, dict) and set(action) == {"kind", "force"}, action
        self.t += 1
        reward = float(np.argmax(action["kind"]) if np.ndim(action["kind"]) else action["kind"])
        reward += float(np.sum(action["force"]))
        return np.full(3, 0.1, np.float32), reward, self.t % 5 == 0, False, {}


def test_a_dict_action_space_is_collected_as_the_torchrl_env_the_error_suggests() -> None:
    from torchrl.envs import GymWrapper

    with pytest.raises(TypeError, match="Collect it as a TorchRL env"):
        Collector(_HybridActions, frames_per_batch=8)
    with Collector(lambda: GymWrapper(_HybridActions()), frames_per_batch=20, total_frames=20,
                   seed=0) as collector:
        batch = collector.next()
    kind, force = batch["kind"], batch["force"]  # each entry a key of the batch, as TorchRL writes it
    assert kind.shape[-1] == 3 and force.shape[-1] == 2 and (kind.sum(-1) == 1).all()
    reward = batch["next", "reward"][..., 0]
    assert torch.allclose(reward, kind.argmax(-1).float() + force.sum(-1))


def test_one_hot_random_actions_are_one_hot() -> None:
    with Collector(GymEnv("CartPole-v1"), None, frames_per_batch=50, total_frames=50, seed=0) as collector:
        batch = next(iter(collector))
    assert batch["action"].shape == (1, 50, 2) and batch["action"].dtype == torch.int64
    assert torch.equal(batch["action"].sum(-1), torch.ones(1, 50, dtype=torch.int64))
    assert 0 < batch["action"][..., 1].sum() < 50


@pytest.mark.parametrize("vector", [[1, 1], [0, 0]])
@pytest.mark.parametrize("kind", [Collector, MultiSyncCollector])
def test_a_one_hot_action_without_exactly_one_1_is_an_error(kind: type, vector: list[int]) -> None:
    """GymEnv's one-hot spec: TorchRL steps ``argmax`` of any vector (action 0 for both of these),
    so the batch would not say which action the env took; the batch check refuses them."""
    module = TensorDictModule(lambda obs: torch.tensor(vector).expand(*obs.shape[:-1], 2),
                              in_keys=["observation"], out_keys=["action"])
    good = TensorDictModule(lambda obs: torch.tensor([0, 1]).expand(*obs.shape[:-1], 2),
                            in_keys=["observation"], out_keys=["action"])
    make = partial(GymEnv, "CartPole-v1")
    common = {"frames_per_batch": 8, "total_frames": 8}
    with (Collector(make, good, **common) if kind is Collector else kind([make] * 2, good, **common)) as fine:
        assert fine.next()["action"][..., 1].all()
    collector = Collector(make, module, **common) if kind is Collector else kind(
        [make] * 2, module, max_worker_restarts=0, **common)
    message = (rf"action of env [01] at step 0 .*{re.escape(str(vector))}, outside "  # either worker's
               r"OneHotSpace\(\(2,\), int64\) \(exactly one 1")
    with collector, pytest.raises(BadDataError, match=message):
        list(collector)


def test_policy_taking_observation_entries_by_name() -> None:
    """A plain module whose forward's arguments are named after observation entries is called
    with them, as TorchRL's collectors do; its weights are the module's own."""
    class ByName(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tilt = TiltPolicy()

        def forward(self, observation: torch.Tensor, step_count: torch.Tensor) -> torch.Tensor:
            return torch.where(step_count[..., 0] < 3, 0, self.tilt(observation))

    module, flipped = ByName(), ByName()
    flipped.tilt.weight.data.neg_()
    before = module.tilt.weight.detach().clone()  # the collector runs (and updates) module itself
    with Collector(make_env(), module, frames_per_batch=40, total_frames=80, seed=0) as collector:
        batches = iter(collector)
        first = next(batches)
        collector.update_policy_weights_(flipped)  # the module's own weight names
        second = next(batches)
    for batch, weight in ((first, before), (second, flipped.tilt.weight)):
        assert batch is not None
        obs, steps = batch["observation"][0], batch["step_count"][0, :, 0]
        assert torch.equal(batch["action"][0], torch.where(steps < 3, 0, (obs @ weight > 0).long()))


def test_unbatched_env_calls_a_tensordict_policy_without_batch_size() -> None:
    seen = []

    class Recording(TensorDictModuleBase):
        in_keys, out_keys = ["observation"], ["action"]

        def forward(self, td: TensorDictBase) -> TensorDictBase:
            seen.append(td.batch_size)
            return td.set("action", (td["observation"][..., 2] > 0).long())

    with Collector(make_env(), Recording(), frames_per_batch=8, total_frames=8) as collector:
        batch = next(iter(collector))
    assert set(seen) == {torch.Size([])} and len(seen) == 9  # the dry step and 8 steps
    assert torch.equal(batch["action"][0], (batch["observation"][0, :, 2] > 0).long())


@pytest.mark.timeout(90)
def test_torchrl_env_in_worker_processes() -> None:
    with MultiSyncCollector([make_env, make_env], policy(), frames_per_batch=20, total_frames=40,
                            seed=0) as collector:
        batches = list(collector)
    assert [b.shape for b in batches] == [torch.Size([2, 10])] * 2  # type: ignore[union-attr]


@pytest.mark.timeout(90)
def test_torchrl_batched_env_instances_in_worker_processes() -> None:
    """Unstarted SerialEnv instances (whose attribute lookup recurses until they start) are sent
    to the workers as they are; each worker steps its own."""
    envs = [SerialEnv(2, make_env), SerialEnv(2, make_env)]
    with MultiSyncCollector(envs, policy(), frames_per_batch=40, total_frames=40, seed=0) as collector:
        batches = list(collector)
    assert [b.shape for b in batches] == [torch.Size([4, 10])]  # type: ignore[union-attr]
    assert batches[0]["observation"].abs().sum() > 0  # type: ignore[index]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("batched", [False, True])
def test_cat_results_groups_the_workers_as_torchrl(batched: bool) -> None:
    """rlcollect.torchrl's MultiSyncCollector: "stack" (the default), 0 and -1 regroup the workers'
    frames as TorchRL does; the frames are the native collector's (same seed), regrouped."""
    make: Callable[[], EnvBase] = (lambda: SerialEnv(2, make_env)) if batched else make_env
    workers, envs = 2, 2 if batched else 1
    steps = 40 // (workers * envs)
    kwargs: dict[str, Any] = {"frames_per_batch": 40, "total_frames": 40}
    with MultiSyncCollector([make, make], policy(), seed=0, **kwargs) as native_collector:
        native = next(iter(native_collector))
    assert native is not None and native.batch_size == (workers * envs, steps)
    by_worker = native.reshape(workers, envs, steps)
    expected = {
        "stack": by_worker if batched else native,
        0: native if batched else native.reshape(-1),
        -1: by_worker.permute(1, 0, 2).reshape(envs, workers * steps) if batched else native.reshape(-1),
    }
    shapes = {"stack": (workers, envs, steps) if batched else (workers, steps),
              0: (workers * envs, steps) if batched else (workers * steps,),
              -1: (envs, workers * steps) if batched else (workers * steps,)}
    for cat, want in expected.items():
        with TorchRLLayoutMultiSync([make, make], policy(), seed=0, cat_results=cat, **kwargs) as collector:
            batch = next(iter(collector))
        assert batch.batch_size == shapes[cat], cat
        for key in ("observation", "action", ("next", "reward"), ("next", "done")):
            assert torch.equal(batch[key], want[key]), (cat, key)
        assert not batch["done"].any()
    theirs = TorchRLMultiSync([make, make], policy(), cat_results="stack", **kwargs)
    try:
        reference = next(iter(theirs))
    finally:
        theirs.shutdown()
    assert reference.batch_size == shapes["stack"]


def float_one_hot_policy() -> TensorDictModule:
    """Scores for the two actions (TorchRL's own examples write a Linear layer's output as the
    action): the env steps with their argmax, the batch holds the floats."""
    return TensorDictModule(lambda obs: torch.stack([-obs[..., 2], obs[..., 2]], -1),
                            in_keys=["observation"], out_keys=["action"])


def continuous_policy() -> TensorDictModule:
    return TensorDictModule(lambda obs: obs[..., :1].clamp(-2.0, 2.0), in_keys=["observation"],
                            out_keys=["action"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("case", "batched"), [  # processes: the one-hot actions of GymEnv's default
    *[(case, batched) for case in ("categorical", "one-hot", "box") for batched in ("one", "serial")],
    ("one-hot", "parallel"), ("float-one-hot", "one"), ("float-one-hot", "parallel"),
])
def test_plain_gym_env_is_stepped_directly_with_torchrl_collectors_frames(case: str, batched: str) -> None:
    """A plain GymEnv (or a SerialEnv or ParallelEnv of them) only converts Gymnasium's arrays to
    TensorDicts: rlcollect steps the Gymnasium envs inside it itself (a ParallelEnv's in a
    Gymnasium AsyncVectorEnv), and the batches are still TorchRL's collector's, key for key and
    value for value, episode ends included."""
    name = "Pendulum-v1" if case == "box" else "CartPole-v1"
    one = partial(GymEnv, name, categorical_action_encoding=case == "categorical")

    def env() -> EnvBase:
        batches = {"one": one, "serial": partial(SerialEnv, 3, one), "parallel": partial(ParallelEnv, 3, one)}
        return batches[batched]()

    make_policy = {"categorical": policy, "one-hot": one_hot_policy, "float-one-hot": float_one_hot_policy,
                   "box": continuous_policy}[case]
    probe = make_env_batch(env())
    assert isinstance(probe, TorchRLGymVector if batched == "parallel" else TorchRLGymEnvs)
    probe.close()
    frames = 600  # every CartPole env ends episodes; Pendulum's end at 200 steps
    seeded = env()
    seeded.set_seed(3)
    theirs = TorchRLCollector(seeded, make_policy(), frames_per_batch=frames, total_frames=2 * frames)
    expected = [b.clone() for b in theirs]
    theirs.shutdown()
    with TorchRLLayoutCollector(env(), make_policy(), frames_per_batch=frames, total_frames=2 * frames,
                                seed=3) as ours:
        got = [b.clone() for b in ours]
    for want, have in zip(expected, got, strict=True):
        assert have.batch_size == want.batch_size
        assert set(have.keys(True, True)) == set(want.keys(True, True))
        for key in want.keys(True, True):
            if key != ("collector", "traj_ids"):  # TorchRL's own numbering
                assert have[key].dtype == want[key].dtype, key
                assert torch.equal(have[key], want[key]), key
    ends = torch.stack(got)["next", "done"].sum()
    assert ends >= (1 if batched == "one" else 3) * (2 if case == "box" else 10)


def test_a_gym_env_that_torchrl_changes_is_stepped_through_torchrl() -> None:
    """Transforms, frame skips and non-CPU or non-Gymnasium specs keep TorchRL's own step."""
    assert isinstance(make_env_batch(GymEnv("CartPole-v1")), TorchRLGymEnvs)
    for env in (make_env(), GymEnv("CartPole-v1", frame_skip=2), SerialEnv(2, make_env),
                SerialEnv(2, lambda: GymEnv("CartPole-v1", frame_skip=2)), ParallelEnv(2, make_env)):
        batch = make_env_batch(env)
        assert type(batch) is TorchRLEnv, env
        batch.close()


def plain_serial_env() -> EnvBase:
    return SerialEnv(3, partial(GymEnv, "CartPole-v1"))


@pytest.mark.timeout(90)
def test_plain_serial_env_in_each_worker_brings_its_own_envs() -> None:
    """A SerialEnv of plain GymEnvs, stepped directly, still counts as the 3 envs it brings."""
    with MultiSyncCollector([plain_serial_env] * 2, None, frames_per_batch=60, total_frames=60,
                            seed=0) as collector:
        batch = next(iter(collector))
    assert batch is not None and batch.batch_size == (6, 10)


def test_torchrl_layout_stores_the_policys_integer_action_dtype() -> None:
    """A bool one-hot action spec and a policy returning int64 one-hots: TorchRL's collector
    stores int64, and so does rlcollect.torchrl (the same values); the native layout stores the
    spec's bool."""
    from torchrl.testing.mocking_classes import DiscreteActionVecMockEnv, DiscreteActionVecPolicy

    def make() -> EnvBase:
        env = DiscreteActionVecMockEnv()
        env.set_seed(1)
        return env

    theirs = TorchRLCollector(make(), DiscreteActionVecPolicy(), frames_per_batch=20, total_frames=20)
    expected = next(iter(theirs))
    theirs.shutdown()
    assert make().action_spec.dtype == torch.bool and expected["action"].dtype == torch.int64
    with TorchRLLayoutCollector(make(), DiscreteActionVecPolicy(), frames_per_batch=20,
                                total_frames=20) as ours:
        got = next(iter(ours))
    assert got["action"].dtype == torch.int64 and torch.equal(got["action"], expected["action"])
    with Collector(make(), DiscreteActionVecPolicy(), frames_per_batch=20, total_frames=20) as native:
        batch = next(iter(native))
    assert batch is not None and batch["action"].dtype == torch.bool
    assert torch.equal(batch["action"][0], expected["action"].bool())


class FloatDoneEnv(EnvBase):
    """Declares its done flag with a float spec (TorchRL allows it): done (1.0) every 3 steps."""

    def __init__(self) -> None:
        from torchrl.data import Composite, Unbounded

        super().__init__()
        self.action_spec = Composite(action=Unbounded((1,)))
        self.reward_spec = Composite(reward=Unbounded((1,)))
        self.done_spec = Composite(done=Unbounded((1,)))
        self.observation_spec = Composite(observation=Unbounded((1,)))
        self.count = 0

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.count = 0
        return self.full_observation_spec.zero().update(self.full_done_spec.zero())

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.count += 1
        out = self.full_observation_spec.zero().update(self.full_reward_spec.zero())
        flags = self.full_done_spec.zero()
        for key in flags.keys():  # noqa: SIM118 (iterating a TensorDict gives rows)
            flags[key] = torch.full((1,), float(self.count % 3 == 0))
        return out.update(flags)

    def _set_seed(self, seed: int | None) -> None:
        pass


def test_float_done_flags_are_flags() -> None:
    """An env whose done spec is a float: a flag is set where it is non-zero; trajectories end
    there, as in TorchRL's collector."""
    with TorchRLLayoutCollector(FloatDoneEnv(), frames_per_batch=9, total_frames=9) as collector:
        batch = next(iter(collector))
    assert batch["next", "done"].dtype == torch.bool
    assert batch["next", "done"][:, 0].tolist() == [False, False, True] * 3
    assert batch["collector", "traj_ids"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def recurrent_policy() -> Any:
    from tensordict.nn import TensorDictSequential
    from torchrl.modules import GRUModule

    torch.manual_seed(0)
    gru = GRUModule(input_size=4, hidden_size=8, in_keys=["observation", "recurrent_state", "is_init"],
                    out_keys=["features", ("next", "recurrent_state")])
    head = TensorDictModule(lambda features: torch.nn.functional.one_hot(features[..., :2].argmax(-1), 2),
                            in_keys=["features"], out_keys=["action"])
    return TensorDictSequential(gru, head)


@pytest.mark.timeout(120)
def test_auto_register_policy_transforms_gives_a_recurrent_policy_its_env_transforms() -> None:
    """auto_register_policy_transforms=True appends the InitTracker and the GRU's primer to a bare
    GymEnv, as TorchRL's collector does: the same keys and the same frames as TorchRL's; the
    default (None) warns that they are missing and the policy's dry step fails without them."""
    def collect(collector_cls: Any) -> TensorDictBase:
        env = GymEnv("CartPole-v1")
        env.set_seed(5)
        collector = collector_cls(env, recurrent_policy(), frames_per_batch=30, total_frames=30,
                                  auto_register_policy_transforms=True)
        batch = next(iter(collector))
        assert {"is_init", "recurrent_state"} <= set(collector.env.observation_spec.keys())
        collector.shutdown()
        return batch

    expected, got = collect(TorchRLCollector), collect(TorchRLLayoutCollector)
    assert set(got.keys(True, True)) == set(expected.keys(True, True))
    for key in ("observation", "action", "is_init", "recurrent_state", ("next", "recurrent_state"),
                ("next", "done")):
        assert torch.equal(got[key], expected[key]), key
    assert bool(got["is_init"][0]) and got["next", "done"].any()
    with pytest.warns(FutureWarning, match="auto_register_policy_transforms=True"), pytest.raises(KeyError):
        TorchRLLayoutCollector(GymEnv("CartPole-v1"), recurrent_policy(), frames_per_batch=30)
    with TorchRLLayoutMultiSync([partial(GymEnv, "CartPole-v1")] * 2, recurrent_policy(), frames_per_batch=20,
                                total_frames=20, auto_register_policy_transforms=True) as workers:
        batch = next(iter(workers))  # each worker appended the transforms to its own env
    assert batch.shape == (2, 10) and bool(batch["is_init"][:, 0].all())


@pytest.mark.timeout(120)
def test_the_missing_transforms_warning_is_for_policies_that_read_is_init() -> None:
    """TorchRL's detection names an InitTracker for any module; the warning that the env lacks
    it comes only for a policy that reads ``is_init`` (a plain module, which TorchRL also warns
    about, needs none)."""
    env = partial(GymEnv, "CartPole-v1", categorical_action_encoding=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        for cls in (Collector, TorchRLLayoutCollector):
            cls(env(), TiltPolicy(), frames_per_batch=10, total_frames=10).shutdown()
    tilt = TiltPolicy()
    reads = TensorDictModule(lambda obs, is_init: tilt(obs), in_keys=["observation", "is_init"],
                             out_keys=["action"])
    with pytest.warns(FutureWarning, match=r"lacks transforms the policy needs \(InitTracker\)"):
        Collector(env(), reads, frames_per_batch=10, total_frames=10).shutdown()


@pytest.mark.timeout(120)
def test_a_policy_without_an_action_builds_as_in_torchrl_and_fails_when_it_acts() -> None:
    """TorchRL's collectors build with a policy that writes no action (a recurrent module alone,
    whose env transforms are then looked at) and fail when it steps: rlcollect.torchrl builds too,
    the transforms are there, and the first batch raises, naming the keys written; the native
    collector refuses it when built."""
    def gru_alone() -> Any:
        return recurrent_policy()[0]

    collector = TorchRLLayoutCollector(GymEnv("CartPole-v1"), gru_alone(), frames_per_batch=10,
                                       total_frames=10, auto_register_policy_transforms=True)
    assert {"is_init", "recurrent_state"} <= set(collector.env.observation_spec.keys())
    with pytest.raises(ValueError, match=r"wrote keys .*'features'.* but no 'action' key"):
        next(iter(collector))
    collector.shutdown()
    torchrl_collector = TorchRLCollector(GymEnv("CartPole-v1"), gru_alone(), frames_per_batch=10,
                                         total_frames=10, auto_register_policy_transforms=True)
    with pytest.raises(KeyError, match="action"):  # TorchRL's env finds no action to step with
        next(iter(torchrl_collector))
    torchrl_collector.shutdown()
    with pytest.raises(ValueError, match="no 'action' key"):
        Collector("CartPole-v1", gru_alone(), frames_per_batch=10)


class DeltaObservation(torchrl.envs.Transform):
    """Writes ``("delta", "observation")``: the step's change of observation (zeros at a reset),
    declared in the observation spec as a nested entry."""

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        delta = next_tensordict.get("observation") - tensordict.get("observation")
        next_tensordict.set(("delta", "observation"), delta)
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        tensordict_reset.set(("delta", "observation"), torch.zeros_like(tensordict_reset.get("observation")))
        return tensordict_reset

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        from torchrl.data import Unbounded

        observation = observation_spec["observation"]
        delta = Unbounded(shape=observation.shape, dtype=observation.dtype)
        observation_spec[("delta", "observation")] = delta
        return observation_spec


def make_delta_env() -> TransformedEnv:
    return TransformedEnv(make_env(), DeltaObservation())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collector_class", [Collector, TorchRLLayoutCollector, TorchRLCollector],
                         ids=["native", "torchrl-layout", "torchrl-itself"])
def test_a_nested_observation_an_env_transform_writes_is_stored(collector_class: type) -> None:
    collector = collector_class(make_delta_env, policy(), frames_per_batch=60, total_frames=60)
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    keys = set(batch.keys(True, True))
    assert {("delta", "observation"), ("next", "delta", "observation")} <= keys
    delta = batch["next", "delta", "observation"]
    expected = batch["next", "observation"] - batch["observation"]  # what the transform computes
    assert delta.abs().sum() > 0 and torch.allclose(delta, expected)
    # the root entry is the delta that led to each observation: the step before's, 0 after a reset
    assert torch.allclose(batch["delta", "observation"][..., 1:, :], delta[..., :-1, :] *
                          (~batch["next", "done"][..., :-1, :]).float())


def _none_cases() -> list[str]:
    import inspect

    skip = {"self", "create_env_fn", "frames_per_batch", "total_frames"}
    parameters = inspect.signature(TorchRLCollector.__init__).parameters.values()
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.name not in skip and p.kind in kinds]


@pytest.mark.timeout(120)
def test_none_means_the_default_for_every_argument_torchrl_accepts_it_for() -> None:
    """TorchRL's trainers pass ``None`` for each collector argument they leave unset; every
    argument of TorchRL's ``Collector`` that TorchRL builds with ``None`` builds here too."""
    import warnings

    names, refused = _none_cases(), []
    assert len(names) > 30
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                TorchRLCollector(make_env, frames_per_batch=10, total_frames=10, **{name: None}).shutdown()
            except Exception:
                continue  # TorchRL refuses it too
            try:
                ours = TorchRLLayoutCollector(make_env, frames_per_batch=10, total_frames=10, **{name: None})
            except Exception as error:
                refused.append(f"{name}: {type(error).__name__}: {error}")
                continue
            assert next(iter(ours)).batch_size == torch.Size([10]), name
            ours.shutdown()
    assert refused == []


@pytest.mark.timeout(120)
def test_a_trainer_config_of_nones_builds_a_multi_process_collector() -> None:
    with TorchRLLayoutMultiSync([make_env, make_env], policy(), frames_per_batch=20, total_frames=20,
                                split_trajs=None, compile_policy=None, max_frames_per_traj=None,
                                init_random_frames=None, reset_at_each_iter=None) as collector:
        (batch,) = list(collector)
    assert batch.batch_size == torch.Size([2, 10])


def test_the_torchrl_module_exports_async_batched_collector_as_torchrl_does() -> None:
    import torchrl.collectors

    import rlcollect.torchrl
    from rlcollect import AsyncBatchedCollector

    assert "AsyncBatchedCollector" in dir(torchrl.collectors)
    assert rlcollect.torchrl.AsyncBatchedCollector is AsyncBatchedCollector
    assert "AsyncBatchedCollector" in rlcollect.torchrl.__all__


@pytest.mark.parametrize("batched", [False, True])
def test_float_one_hot_actions_through_torchrls_step(batched: bool) -> None:
    """A float one-hot action on a GymEnv that TorchRL steps (a transform on it): TorchRL's
    frames, the floats stored as written, in the native layout as well."""
    def one() -> EnvBase:
        return TransformedEnv(GymEnv("CartPole-v1"), StepCounter(40))

    def env() -> EnvBase:
        return SerialEnv(2, one) if batched else one()

    assert_same_frames(env, float_one_hot_policy, 80 if batched else 40, batched)
    with Collector(env(), float_one_hot_policy(), frames_per_batch=40, total_frames=40) as native:
        batch = next(iter(native))
    assert batch is not None and batch["action"].dtype == torch.float32
    assert not torch.equal(batch["action"], batch["action"].round())  # scores, not 0s and 1s


def plain_cartpole() -> EnvBase:
    return GymEnv("CartPole-v1")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector, AsyncBatchedCollector])
def test_float_one_hot_actions_in_worker_collectors(cls: type) -> None:
    """Workers and the policy server store the float scores the policy wrote for each observation."""
    with cls([plain_cartpole] * 2, float_one_hot_policy(), frames_per_batch=40, total_frames=80,
             seed=1) as collector:
        batches = [batch.clone() for batch in collector]
    for batch in batches:
        assert batch["action"].dtype == torch.float32
        obs = batch["observation"]
        assert torch.equal(batch["action"], torch.stack([-obs[..., 2], obs[..., 2]], -1))
