"""What TorchRL's own tools call on a collector: its ``Evaluator`` (through ``_dump_env_transform``),
worker calls through ``map_fn``, and the deprecated ``DataCollectorBase``; each beside TorchRL."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")
# TorchRL's Evaluator leaves traj_format unset, and its envs lack the transforms TorchRL's own
# check finds a Linear policy needs: both collectors say so, as TorchRL 0.14 does
pytestmark = [pytest.mark.filterwarnings("ignore:trajs_per_batch:FutureWarning"),
              pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs:FutureWarning")]

from tensordict import TensorDict, TensorDictBase  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.collectors import Evaluator as TorchRLEvaluator  # noqa: E402
from torchrl.collectors import MultiSyncCollector as TorchRLMultiSync  # noqa: E402
from torchrl.envs import EnvBase, GymEnv, StepCounter, Transform, TransformedEnv  # noqa: E402

import rlcollect  # noqa: E402
import rlcollect.torchrl as wing  # noqa: E402
from tests.envs_for_tests import WeightedPolicy, make_cartpole, tilt_module  # noqa: E402


def seeded_env() -> EnvBase:
    env = GymEnv("CartPole-v1")
    env.set_seed(5)
    return env


def linear_policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(4, 2), in_keys=["observation"], out_keys=["action"])


@pytest.mark.timeout(120)
def test_evaluator_on_rlcollect_gives_torchrls_metrics() -> None:
    """TorchRL's Evaluator with its own Collector and rlcollect.torchrl's Evaluator (rlcollect's
    Collector): the same episodes, twice in a row; collector_cls by name from rlcollect.torchrl."""
    results = []
    for evaluator_class in (TorchRLEvaluator, wing.Evaluator):
        evaluator = evaluator_class(seeded_env(), linear_policy(), num_trajectories=3, max_steps=60)
        results.append([evaluator.evaluate() for _ in range(2)])
        evaluator.shutdown()
    theirs, ours = results
    for want, have in zip(theirs, ours, strict=True):
        assert {k: v for k, v in have.items() if k != "eval/fps"} == \
            {k: v for k, v in want.items() if k != "eval/fps"}
    assert theirs[0]["eval/num_episodes"] == 3
    evaluator = wing.Evaluator(seeded_env(), linear_policy(), num_trajectories=2, collector_cls="Collector")
    assert evaluator.evaluate()["eval/num_episodes"] == 2
    evaluator.shutdown()
    with pytest.raises(ValueError, match="collector_cls='Nope'.*allowed.*'Collector'"):
        wing.Evaluator(seeded_env(), linear_policy(), collector_cls="Nope")


class Dumps(Transform):
    """A transform that writes a file named after the step when dumped (as VideoRecorder writes)."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def dump(self, step: int | None = None) -> None:
        Path(self.folder, f"dump-{step}-{torch.randint(1 << 30, ()).item()}").touch()


def dumping_env(folder: str) -> EnvBase:
    return TransformedEnv(GymEnv("CartPole-v1"), Dumps(folder))


@pytest.mark.timeout(120)
def test_dump_env_transform_in_this_process_and_in_each_worker(tmp_path: Path) -> None:
    with wing.Collector(dumping_env(str(tmp_path)), frames_per_batch=8, total_frames=8) as collector:
        collector._dump_env_transform(step=3)
    assert [p.name.split("-")[1] for p in tmp_path.iterdir()] == ["3"]
    workers = tmp_path / "workers"
    workers.mkdir()
    make = [lambda: dumping_env(str(workers))] * 2
    with wing.MultiSyncCollector(make, frames_per_batch=16, total_frames=16) as multi:
        multi._dump_env_transform(step=7)
    assert sorted(p.name.split("-")[1] for p in workers.iterdir()) == ["7", "7"]
    with wing.Collector(GymEnv("CartPole-v1"), frames_per_batch=8, total_frames=8) as plain:
        plain._dump_env_transform(step=1)  # no transform: nothing, as in TorchRL


def cartpole() -> EnvBase:
    return GymEnv("CartPole-v1")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("track", [False, True])
def test_map_fn_get_policy_version_answers_as_torchrls_workers(track: bool) -> None:
    answers: list[list[Any]] = []
    for cls in (TorchRLMultiSync, wing.MultiSyncCollector):
        collector = cls([cartpole] * 2, linear_policy(), frames_per_batch=20, total_frames=40,
                        track_policy_version=track)
        batches = iter(collector)
        next(batches)
        answers.append(collector.map_fn("get_policy_version"))
        collector.update_policy_weights_()
        next(batches)
        answers.append(collector.map_fn("get_policy_version"))
        collector.shutdown()
    assert answers[:2] == answers[2:] == ([[0, 0], [1, 1]] if track else [[None, None]] * 2)
    with rlcollect.MultiSyncCollector([cartpole] * 2, frames_per_batch=20) as native:
        assert native.call_workers("get_policy_version", [(), ()]) == [0, 0]
        assert [type(env).__name__ for env in native.call_workers("env")] == ["GymEnv"] * 2


@pytest.mark.timeout(180)
def test_the_workers_replay_buffer_is_the_collectors_as_in_torchrl() -> None:
    """TorchRL's workers share the collector's replay buffer: asked through ``map_fn`` or
    ``get_distant_attr``, each answers with the buffer the collector extends."""
    from torchrl.data import LazyMemmapStorage, ReplayBuffer
    from torchrl.envs.utils import RandomPolicy

    answers = []
    for cls in (TorchRLMultiSync, wing.MultiSyncCollector):
        buffer = ReplayBuffer(storage=LazyMemmapStorage(1000))
        collector = cls([cartpole] * 2, RandomPolicy(cartpole().action_spec), frames_per_batch=20,
                        total_frames=40, replay_buffer=buffer)
        for _ in collector:
            pass
        answers.append((len(buffer), buffer.write_count, collector.map_fn("replay_buffer.__len__"),
                        collector.get_distant_attr("replay_buffer.write_count")))
        collector.shutdown()
    assert answers[0] == answers[1] == (40, 40, [40, 40], [40, 40])
    with rlcollect.MultiSyncCollector([cartpole] * 2, frames_per_batch=20) as native:  # no buffer
        assert native.call_workers("replay_buffer") == [None, None]


def test_data_collector_base_is_base_collector_and_warns_when_built() -> None:
    class Mine(wing.DataCollectorBase):
        def __init__(self) -> None:
            self.frames = 0

        def iterator(self) -> Any:
            yield from ()

        def shutdown(self, timeout: float | None = None, close_env: bool = True,
                     raise_on_error: bool = True) -> None:
            pass

        def set_seed(self, seed: int, static_seed: bool = False) -> int:
            return seed

        def state_dict(self) -> dict[str, Any]:
            return {}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            pass

        def _update_weights(self, *args: Any, **kwargs: Any) -> None:
            pass

        def stats(self) -> TensorDictBase:
            raise NotImplementedError

    with pytest.warns(DeprecationWarning, match="Mine has been deprecated.*use DataCollectorBase"):
        mine = Mine()
    assert isinstance(mine, rlcollect.BaseCollector)
    with rlcollect.Collector("CartPole-v1", frames_per_batch=4) as native:
        assert isinstance(native, wing.DataCollectorBase)
    assert issubclass(wing.DataCollectorBase, rlcollect.BaseCollector)


@pytest.mark.timeout(120)
def test_reset_drops_the_trajectories_held_for_trajs_per_batch_as_torchrl() -> None:
    """After reset(), a trajs_per_batch batch holds only episodes begun after it: TorchRL's
    episodes, first observation for first observation (the ones held from before were yielded)."""
    from torchrl.collectors import Collector as TorchRLCollector

    starts = []
    for cls in (TorchRLCollector, wing.Collector):
        collector = cls(seeded_env(), linear_policy(), frames_per_batch=60, total_frames=-1,
                        max_frames_per_traj=60, trajs_per_batch=3, traj_format="padded")
        for _ in range(3):
            collector.reset()
            batch = next(iter(collector))
            starts.append(batch["observation"][:, 0])
        collector.shutdown()
    for want, have in zip(starts[:3], starts[3:], strict=True):
        assert torch.equal(have, want)
    assert not torch.equal(starts[3], starts[4])


def test_a_partial_reset_is_refused_naming_it() -> None:
    with wing.Collector(categorical_cartpole, frames_per_batch=8) as collector:
        first = collector.next()
        with pytest.raises(ValueError, match=r"reset\(index=0.*partial reset"):
            collector.reset(index=0)
        with pytest.raises(ValueError, match="keyword arguments"):
            collector.reset(options={})
        collector.reset()  # every env: the next batch starts new trajectories
        after = collector.next()
    assert after["collector", "traj_ids"][0] > first["collector", "traj_ids"].max()


def tilt_policy() -> TensorDictModule:
    """No parameter: a policy device cannot be checked against it."""
    return TensorDictModule(lambda obs: (obs[..., 2:3] > 0).long().squeeze(-1), in_keys=["observation"],
                            out_keys=["action"])


def categorical_cartpole() -> EnvBase:
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    env.set_seed(2)
    return env


@pytest.mark.skipif(torch.cuda.is_available(), reason="cudagraph_policy is refused where CUDA is")
@pytest.mark.parametrize(("arguments", "warning", "flags"), [
    ({"policy_device": "cpu"}, "no parameter", (False, False)),
    ({"policy_device": "cpu", "trust_policy": True}, None, (True, False)),
    ({"cudagraph_policy": True}, "no CUDA device", (False, True)),
])
def test_trust_policy_and_cudagraph_policy_as_torchrl(arguments: dict[str, Any], warning: str | None,
                                                      flags: tuple[bool, bool]) -> None:
    """The same warnings (or none), flags and batches as TorchRL's collector on a machine
    without CUDA: TorchRL's CudaGraphModule runs the policy as it is there."""
    from torchrl.collectors import Collector as TorchRLCollector

    batches = []
    for cls in (TorchRLCollector, wing.Collector):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            collector = cls(categorical_cartpole(), tilt_policy(), frames_per_batch=16, total_frames=16,
                            **arguments)
            batches.append(next(iter(collector)))
        texts = " ".join(str(w.message) for w in caught)
        said = ("parameter" in texts and "policy" in texts) if warning == "no parameter" else \
            ("CUDA" in texts) if warning else ("parameter" in texts or "CUDA" in texts)
        assert said == (warning is not None), (cls, texts)
        assert (collector.trust_policy, collector.cudagraphed_policy) == flags
        assert not collector.compiled_policy and not collector.verbose
        collector.shutdown()
    assert torch.equal(batches[0]["action"], batches[1]["action"])


@pytest.mark.timeout(120)
def test_update_keywords_and_schemes_with_an_updater_as_torchrl() -> None:
    """update_policy_weights_(foo=1) is ignored without an updater; given schemes and a legacy
    updater, the schemes win and the updater is dropped (rlcollect's own collectors refuse both)."""
    from torchrl.collectors import Collector as TorchRLCollector
    from torchrl.collectors import VanillaWeightUpdater
    from torchrl.weight_update import SharedMemWeightSyncScheme as TorchRLShared

    for cls in (TorchRLCollector, wing.Collector):
        single = cls(GymEnv("CartPole-v1"), linear_policy(), frames_per_batch=8, total_frames=8)
        single.update_policy_weights_(foo=1)
        single.shutdown()
    from torchrl.weight_update import NoWeightSyncScheme as TorchRLNoScheme

    schemes = {"weight_sync_schemes": {"policy": TorchRLNoScheme()}, "weight_updater": VanillaWeightUpdater}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for cls in (TorchRLCollector, wing.Collector):
            single = cls(GymEnv("CartPole-v1"), linear_policy(), frames_per_batch=8, total_frames=8,
                         **schemes)
            assert single.weight_updater is None and set(single._weight_sync_schemes) == {"policy"}
            single.shutdown()
        for cls in (TorchRLMultiSync, wing.MultiSyncCollector):
            with pytest.raises(TypeError, match="Cannot specify both weight_sync_schemes and weight_updater"):
                cls([cartpole], linear_policy(), frames_per_batch=8, total_frames=8, **schemes)
    with pytest.raises(ValueError, match="weight_sync_schemes or the legacy weight_updater, not both"):
        rlcollect.MultiSyncCollector([cartpole], linear_policy(), frames_per_batch=8,
                                     weight_sync_schemes={"policy": TorchRLShared()},
                                     weight_updater=VanillaWeightUpdater)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cls", [rlcollect.Collector, rlcollect.MultiSyncCollector,
                                 rlcollect.MultiAsyncCollector, rlcollect.AsyncBatchedCollector])
def test_torchrls_rpc_and_distributed_schemes_send_through_the_collectors_own_transport(cls: type) -> None:
    """TorchRL's schemes rlcollect has none of (RPC, torch.distributed) are accepted on the sending
    side: the weights reach the workers through the collector's default scheme."""
    from torchrl.weight_update import DistributedWeightSyncScheme, RPCWeightSyncScheme

    for scheme in (DistributedWeightSyncScheme(), RPCWeightSyncScheme()):
        envs: Any = make_cartpole if cls is rlcollect.Collector else [make_cartpole]
        schemes = {"policy": scheme}
        with cls(envs, WeightedPolicy(scale=1.0), frames_per_batch=8, weight_sync_schemes=schemes) as c:
            first = c.next()
            c.update_policy_weights_(WeightedPolicy(scale=-1.0))
            for _ in range(3):  # an asynchronous worker may hand in a batch begun before the update
                second = c.next()
        assert first is not None and (first["action"] == 1).all()
        assert second is not None and (second["action"] == 0).all() and (second["policy_version"] == 1).all()


def cartpole_env() -> EnvBase:
    return GymEnv("CartPole-v1")


@pytest.mark.timeout(180)
@pytest.mark.filterwarnings("ignore:You are using a Backend:UserWarning")  # torch.distributed's, via TorchRL
def test_torchrls_rpc_collector_drives_rlcollect_collectors_on_its_nodes() -> None:
    """TorchRL's RPCCollector with rlcollect.torchrl.Collector on its node: the node registers
    TorchRL's RPC receiver scheme as TorchRL's collector does, the driver's weight updates reach it
    (each batch's actions come from the weights of the update before it), and the run ends."""
    from torchrl.collectors.distributed import RPCCollector
    from torchrl.weight_update import RPCWeightSyncScheme

    policy = linear_policy()
    collector = RPCCollector([cartpole_env], policy, frames_per_batch=20, total_frames=60,
                             collector_class=wing.Collector, launcher="mp", sync=True,
                             weight_sync_schemes={"policy": RPCWeightSyncScheme()})
    batches = 0
    try:  # a failed check must still stop TorchRL's RPC agent (it holds a fixed port)
        for batch in collector:
            with torch.no_grad():  # the node acts one frame at a time: float noise against a batch of 20
                torch.testing.assert_close(batch["action"], policy.module(batch["observation"]),
                                           rtol=1e-4, atol=1e-5)
                policy.module.weight.add_(1.0)
            collector.update_policy_weights_()
            batches += 1
    finally:
        collector.shutdown()
    assert batches == 3


def identity_module() -> TensorDictModule:
    linear = torch.nn.Linear(3, 3)
    with torch.no_grad():
        linear.weight.copy_(torch.eye(3))
        linear.bias.zero_()
    return TensorDictModule(linear, in_keys=["observation"], out_keys=["observation"])


def pendulum_with_module() -> EnvBase:
    from torchrl.envs.transforms.module import ModuleTransform

    transform = ModuleTransform(module_factory=identity_module, no_grad=True)
    return GymEnv("Pendulum-v1").append_transform(transform)


def pendulum_policy() -> TensorDictModule:
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


@pytest.mark.timeout(180)
@pytest.mark.filterwarnings("ignore:state_dict strategy is experimental:UserWarning")  # TorchRL's, as written
@pytest.mark.parametrize("cls", [wing.Collector, wing.MultiSyncCollector])
def test_model_ids_into_the_envs_transforms_as_torchrls_example(cls: type) -> None:
    """TorchRL's multi-weight example: "env.transform[0].module" addresses each env's
    ModuleTransform (in each worker's own env); one weights_dict update changes it and the policy
    together, from the next batch on (zeros: the observations and the actions become 0)."""
    from torchrl.weight_update import MultiProcessWeightSyncScheme

    schemes = {"policy": MultiProcessWeightSyncScheme(strategy="state_dict"),
               "env.transform[0].module": MultiProcessWeightSyncScheme(strategy="tensordict")}
    envs: Any = pendulum_with_module if cls is wing.Collector else [pendulum_with_module] * 2
    collector = cls(envs, pendulum_policy(), frames_per_batch=40, total_frames=160, max_frames_per_traj=50,
                    weight_sync_schemes=schemes)
    zeros = {"policy": TensorDict.from_module(pendulum_policy()).data.zero_(),
             "env.transform[0].module": TensorDict.from_module(identity_module()).data.zero_()}
    zeroed = []
    for index, batch in enumerate(collector):
        zeroed.append(bool((batch["next", "observation"] == 0).all() and (batch["action"] == 0).all()))
        if index == 1:
            collector.update_policy_weights_(weights_dict=zeros)
    collector.shutdown()
    assert zeroed == [False, False, True, True]
    with pytest.raises(KeyError, match=r"model id 'env.transform\[5\].module' does not resolve in the env"):
        wing.Collector(pendulum_with_module, pendulum_policy(), frames_per_batch=8, max_frames_per_traj=50,
                       weight_sync_schemes={"env.transform[5].module": MultiProcessWeightSyncScheme()})


def test_profiling_stands_in_for_the_post_collect_hook_and_gives_it_back_as_torchrl(tmp_path: Path) -> None:
    """TorchRL's ``Collector``: ``enable_profile`` installs a hook of its own as ``post_collect_hook``
    and ``disable_profile`` restores the one before. Here the user's hook still runs meanwhile (on
    each batch, as without profiling), and the trace is written."""
    seen: list[int] = []

    def user_hook(batch: TensorDictBase) -> None:
        seen.append(batch.numel())

    with wing.Collector(make_cartpole, frames_per_batch=4, total_frames=16, post_collect_hook=user_hook,
                        seed=0) as collector:
        collector.enable_profile(num_rollouts=3, warmup_rollouts=1,
                                 save_path=tmp_path / "trace_{worker_idx}.json")
        assert isinstance(collector.post_collect_hook, wing.collectors.ProfilerHook)
        assert collector.post_collect_hook is not user_hook
        batches = [batch.numel() for batch in collector]
        assert collector.post_collect_hook is not user_hook
        collector.disable_profile()
        assert collector.profile_config is None
        assert collector.post_collect_hook is user_hook
    assert seen == batches == [4, 4, 4, 4]
    assert (tmp_path / "trace_0.json").stat().st_size > 0


def counted_env(seed: int) -> Callable[[], EnvBase]:
    def make() -> EnvBase:
        env = TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter())
        env.set_seed(seed)
        return env

    return make


@pytest.mark.timeout(120)
def test_multi_sync_reset_and_reset_idx_as_torchrl() -> None:
    """``reset()`` and ``reset(reset_idx)`` of TorchRL's ``MultiSyncCollector``: the same frames
    (trajectory ids aside: TorchRL's workers draw theirs from a shared counter, in the order they
    start)."""
    runs = []
    for cls in (TorchRLMultiSync, wing.MultiSyncCollector):
        policy = tilt_module()
        collector = cls([counted_env(1), counted_env(2)], policy, frames_per_batch=20, total_frames=200,
                        cat_results="stack")
        try:
            batches = [collector.next().clone()]
            collector.reset()
            batches.append(collector.next().clone())
            collector.reset([False, True])
            batches.append(collector.next().clone())
        finally:
            collector.shutdown()
        runs.append(batches)
    theirs, ours = runs
    assert [b["step_count"][:, 0].reshape(-1).tolist() for b in ours] == [[0, 0], [0, 0], [10, 0]]
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.batch_size == other.batch_size == torch.Size([2, 10])
        keys = set(other.keys(True, True)) - {("collector", "traj_ids")}
        assert set(mine.keys(True, True)) - {("collector", "traj_ids")} == keys
        for key in keys:
            torch.testing.assert_close(mine[key], other[key], msg=lambda m, k=key: f"{k}: {m}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("multi", [False, True])
def test_accessors_torchrls_trainers_call_answer_as_torchrl(multi: bool) -> None:
    """``getattr_env`` (TorchRL's SAC trainer reads the action spec so), ``getattr_policy``,
    ``getattr_rb`` (its off-policy trainer polls ``write_count``), ``get_model``,
    ``set_post_collect_hook``, ``closed`` (its distributed runners check it) and ``worker_idx``."""
    from torchrl.collectors import Collector as TorchRLCollector
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    answers = []
    for cls in ((TorchRLMultiSync, wing.MultiSyncCollector) if multi else (TorchRLCollector, wing.Collector)):
        policy = tilt_module()
        buffer = ReplayBuffer(storage=LazyTensorStorage(100))
        envs = [counted_env(1), counted_env(2)] if multi else counted_env(1)
        collector = cls(envs, policy, frames_per_batch=20, total_frames=40, replay_buffer=buffer)
        seen: list[int] = []
        try:
            collector.set_post_collect_hook(seen.append)
            if not multi:  # TorchRL's workers get their hook when they start
                assert collector.post_collect_hook is not None
            got = {"spec": collector.getattr_env("full_action_spec_unbatched"),
                   "in_keys": collector.getattr_policy("in_keys"),
                   "worker_idx": collector.worker_idx, "closed": collector.closed}
            for _ in collector:
                pass
            got["write_count"] = collector.getattr_rb("write_count")
            got["model"] = collector.get_model("policy") is policy if not multi else None
        finally:
            collector.shutdown()
        got["closed after"] = collector.closed
        answers.append(got)
    theirs, ours = answers
    assert ours == theirs
    assert ours["write_count"] == 40 and ours["in_keys"] == ["observation"] and not ours["closed"]


@pytest.mark.timeout(180)
@pytest.mark.filterwarnings("ignore:The 'optimizer' hook stage will be replaced:FutureWarning")  # TorchRL's
def test_torchrls_trainer_with_background_collection_trains_on_the_workers_frames() -> None:
    """TorchRL's ``Trainer(async_collection=True)`` starts the collector, polls
    ``getattr_rb("write_count")`` until the buffer the workers fill holds ``total_frames``, and
    shuts the collector down (it raised AttributeError at the first poll before)."""
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.modules import MLP, QValueActor
    from torchrl.objectives import DQNLoss
    from torchrl.trainers import Trainer

    torch.manual_seed(0)
    make = counted_env(1)
    actor = QValueActor(MLP(out_features=2, num_cells=[16]), in_keys=["observation"], spec=make().action_spec)
    actor(make().reset())
    buffer = ReplayBuffer(storage=LazyTensorStorage(1000), batch_size=16)
    collector = wing.MultiSyncCollector([make, counted_env(2)], actor, frames_per_batch=40, total_frames=400,
                                        replay_buffer=buffer)
    loss = DQNLoss(actor, action_space=make().action_spec, delay_value=False)
    trainer = Trainer(collector=collector, total_frames=400, frame_skip=1, optim_steps_per_batch=1,
                      loss_module=loss, optimizer=torch.optim.Adam(loss.parameters(), 1e-3),
                      replay_buffer=buffer, batch_size=16, progress_bar=False, async_collection=True)
    trainer.train()
    assert collector.closed
    assert buffer.write_count >= 400 and len(buffer) == buffer.write_count
    assert trainer.collected_frames >= 360  # read from the buffer's write_count as it grew


@pytest.mark.timeout(60)
@pytest.mark.parametrize("serial", [False, True], ids=["one-env", "serial-env"])
def test_rollout_returns_the_batch_as_torchrls(serial: bool) -> None:
    """``rollout()`` is a batch in TorchRL's layout (``[T]`` for one unbatched env, root done
    entries, no ``policy_version``), as TorchRL's ``Collector.rollout()``; it gave the native
    buffer, ``[1, T]``, before."""
    from torchrl.collectors import Collector as TorchRLCollector
    from torchrl.envs import SerialEnv

    def make() -> EnvBase:
        return SerialEnv(2, categorical_cartpole) if serial else categorical_cartpole()

    batches = []
    for cls in (TorchRLCollector, wing.Collector):
        collector = cls(make, tilt_module(), frames_per_batch=20, total_frames=40)
        try:
            batches.append(collector.rollout().clone())
        finally:
            collector.shutdown()
    want, got = batches
    assert got.batch_size == want.batch_size == ((2, 10) if serial else (20,))
    assert got.names == want.names
    assert set(got.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True, True):
        assert torch.equal(got[key], want[key]), key


def record_pid(folder: Path) -> None:
    (folder / str(os.getpid())).touch()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["MultiSyncCollector", "MultiAsyncCollector"])
def test_init_fn_runs_once_in_each_worker_as_torchrl(name: str, tmp_path: Path) -> None:
    """TorchRL's ``init_fn`` (no argument) runs first in each worker process, never here."""
    import torchrl.collectors

    for owner in (torchrl.collectors, wing):
        folder = tmp_path / owner.__name__
        folder.mkdir()
        collector = getattr(owner, name)([categorical_cartpole] * 2, tilt_module(), frames_per_batch=20,
                                         total_frames=40, init_fn=functools.partial(record_pid, folder))
        try:
            for _ in collector:
                pass
        finally:
            collector.shutdown()
        pids = {int(path.name) for path in folder.iterdir()}
        assert len(pids) == 2 and os.getpid() not in pids, owner.__name__


@pytest.mark.timeout(60)
def test_ray_collector_refuses_an_in_process_replay_buffer_as_torchrl() -> None:
    """TorchRL's RayCollector takes only a buffer its actors can reach; rlcollect's own takes any."""
    from torchrl.collectors.distributed import RayCollector as TorchRLRayCollector
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    buffer = ReplayBuffer(storage=LazyTensorStorage(100))
    builds: list[Callable[[], Any]] = [
        lambda: TorchRLRayCollector([make_cartpole], frames_per_batch=20, replay_buffer=buffer),
        lambda: wing.RayCollector([make_cartpole], frames_per_batch=20, replay_buffer=buffer),
        lambda: wing.Collector(make_cartpole, backend="ray", replay_buffer=buffer, frames_per_batch=20),
    ]
    for build in builds:
        with pytest.raises(TypeError, match="cannot be shared with distant Ray actors"):
            build()
    assert "rlcollect.RayCollector takes one" in str(pytest.raises(TypeError, builds[1]).value)


def _pipe_updater(base: type) -> Any:
    """An updater written as TorchRL's own tests write one: the steps of ``push_weights``, each
    worker's update sent through ``collector.pipes``, from ``base`` (TorchRL's or the wing's)."""

    class PipeUpdater(base):  # type: ignore[misc, valid-type]
        def __init__(self, weights: TensorDictBase, num_workers: int) -> None:
            self.weights, self.num_workers = weights, num_workers

        def _sync_weights_with_worker(self, worker_id: int, server_weights: TensorDictBase) -> None:
            self.collector.pipes[worker_id].send((server_weights, "update"))
            _, message = self.collector.pipes[worker_id].recv()
            assert message == "updated"

        def _get_server_weights(self) -> TensorDictBase:
            return self.weights

        def _maybe_map_weights(self, server_weights: TensorDictBase) -> TensorDictBase:
            return server_weights

        def all_worker_ids(self) -> list[int]:
            return list(range(self.num_workers))

    return PipeUpdater


def _pendulum() -> EnvBase:
    return GymEnv("Pendulum-v1")


@pytest.mark.timeout(180)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # TorchRL deprecates the legacy updater
def test_a_legacy_updater_sending_through_the_pipes_updates_the_workers_as_on_torchrl() -> None:
    """TorchRL's legacy protocol, on TorchRL's MultiSyncCollector and the wing's: after the updater
    pushes zeroed weights, every action of the next batch is 0 on both."""
    from torchrl.collectors import WeightUpdaterBase as TorchRLUpdaterBase

    actions = {}
    for name, collector_class, base in (("torchrl", TorchRLMultiSync, TorchRLUpdaterBase),
                                        ("wing", wing.MultiSyncCollector, wing.WeightUpdaterBase)):
        torch.manual_seed(0)
        policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
        weights = TensorDict.from_module(policy).data.clone()
        collector = collector_class([_pendulum, _pendulum], policy, frames_per_batch=40, total_frames=-1,
                                    weight_updater=_pipe_updater(base)(weights, 2))
        try:
            assert collector._legacy_weight_updater
            first = collector.next()
            assert (first["action"] != 0).any()
            weights.zero_()
            collector.update_policy_weights_()  # the updater takes its server's (zeroed) weights
            actions[name] = collector.next()["action"]
        finally:
            collector.shutdown()
    assert actions["torchrl"].shape == actions["wing"].shape
    assert (actions["torchrl"] == 0).all() and (actions["wing"] == 0).all(), actions
    with wing.MultiSyncCollector([_pendulum, _pendulum], frames_per_batch=40) as collector:
        with pytest.raises(NotImplementedError, match=r"pipes\[0\].send\('seed'\).*weight updates"):
            collector.pipes[0].send("seed")
        with pytest.raises(RuntimeError, match=r"pipes\[1\].recv\(\): no update was sent"):
            collector.pipes[1].recv()


@pytest.mark.timeout(120)
def test_a_weightless_policy_with_a_receiver_scheme_builds_and_collects_as_on_torchrl() -> None:
    """TorchRL's RandomPolicy with a receiver scheme for "policy" (TorchRL's RPC collector node
    builds one so): TorchRL builds it and treats updates as no-ops; so does the wing, saying once
    that the policy has no weights; both collect."""
    from torchrl.envs.utils import RandomPolicy
    from torchrl.weight_update import RPCWeightSyncScheme

    shapes = {}
    for name, collector_class in (("torchrl", torchrl.collectors.Collector), ("wing", wing.Collector)):
        env = seeded_env()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            collector = collector_class(seeded_env, RandomPolicy(env.action_spec), frames_per_batch=10,
                                        total_frames=20, worker_idx=0,
                                        weight_recv_schemes={"policy": RPCWeightSyncScheme()})
        try:
            shapes[name] = [batch.shape for batch in collector]
            if name == "wing":
                said = [str(w.message) for w in caught if "has no weights" in str(w.message)]
                assert len(said) == 1 and said[0].startswith("weight_recv_schemes['policy']"), said
                collector.receive_weights()  # nothing registered for a weightless policy: nothing to do
        finally:
            collector.shutdown()
    assert shapes["torchrl"] == shapes["wing"] == [torch.Size([10])] * 2


@pytest.mark.timeout(180)
def test_each_workers_policy_state_dict_is_in_torchrls_state_layout() -> None:
    """``state_dict()["worker<i>"]["policy_state_dict"]``, as TorchRL's multi-process collectors give
    it (its Evaluator's tests read it): the policy's weights at the start, and after an update the
    weights sent, key for key, on TorchRL and on the wing. An edit in place not sent yet shows on
    TorchRL, whose CPU workers share the policy's memory, not on the wing: its workers act with
    the weights they were sent, which is what the entry says."""
    for collector_class in (TorchRLMultiSync, wing.MultiSyncCollector):
        torch.manual_seed(0)
        policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
        start = {key: value.clone() for key, value in policy.state_dict().items()}
        collector = collector_class([_pendulum, _pendulum], policy, frames_per_batch=40, total_frames=-1)
        try:
            collector.next()
            for worker in ("worker0", "worker1"):
                entry = collector.state_dict()[worker]["policy_state_dict"]
                assert set(entry) == set(start) and all(torch.equal(entry[k].cpu(), start[k]) for k in start)
            with torch.no_grad():
                policy.module.weight.add_(1.0)
            edited = {key: value.clone() for key, value in policy.state_dict().items()}
            unsent = collector.state_dict()["worker0"]["policy_state_dict"]
            shown = edited if collector_class is TorchRLMultiSync else start
            assert all(torch.equal(unsent[k].cpu(), shown[k]) for k in start), collector_class
            collector.update_policy_weights_()
            for worker in ("worker0", "worker1"):
                entry = collector.state_dict()[worker]["policy_state_dict"]
                assert all(torch.equal(entry[k].cpu(), edited[k]) for k in start), (collector_class, worker)
        finally:
            collector.shutdown()
    # workers that built their policies with a policy_factory: theirs are unknown here until weights are sent
    def factory() -> TensorDictModule:
        return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])

    with wing.MultiSyncCollector([_pendulum] * 2, policy_factory=factory, frames_per_batch=40) as collector:
        assert "policy_state_dict" not in collector.state_dict()["worker0"]
        collector.update_policy_weights_(TensorDict.from_module(policy).data)
        entry = collector.state_dict()["worker1"]["policy_state_dict"]
        assert all(torch.equal(entry[k], edited[k]) for k in start)
