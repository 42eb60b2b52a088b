"""Weight-sync schemes on the collectors: what each scheme moves, versions, subsets, atomic pairs,
failed updates, receivers, cascades through nested worker processes, the legacy updater, errors.

Ray's scheme is tested with the Ray collector (tests/distributed); the distributed scheme in
test_distributed.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect import Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.weights import (
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    RayWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightStore,
    WeightSyncScheme,
    WeightUpdaterBase,
    as_weights,
)
from rlcollect.weights.pipe import PipeWeights
from tests.envs_for_tests import Offset, TiltPolicy, WeightedPolicy, make_cartpole

pytestmark = pytest.mark.timeout(120)


def drop_ids(batch: TensorDictBase) -> TensorDictBase:
    return batch.exclude(("collector", "traj_ids"))


def versions(batch: TensorDictBase | None) -> list[int]:
    assert batch is not None
    return batch["policy_version"][:, 0].tolist()


@pytest.mark.parametrize("scheme", [SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme])
def test_scheme_moves_weights_with_versions_subsets_pairs_and_survives_a_failed_update(
        scheme: type[WeightSyncScheme]) -> None:
    policy = WeightedPolicy(scale=1.0)
    with MultiSyncCollector("CartPole-v1", policy, num_workers=2, frames_per_batch=8,
                            models={"offset": policy.offset},
                            weight_sync_schemes={"policy": scheme(), "offset": scheme()}) as collector:
        assert {type(s) for s in collector.weight_sync_schemes.values()} == {scheme}
        first = collector.next()
        assert first is not None and (first["action"] == 1).all() and versions(first) == [0, 0]
        # two models at once: each alone would keep action 1, both together give 0
        collector.update_policy_weights_(weights_dict={"policy": TensorDict({"scale": torch.tensor(0.4)}),
                                                       "offset": Offset(-0.6)})
        second = collector.next()
        assert second is not None and (second["action"] == 0).all() and versions(second) == [1, 1]
        # worker 1 only: its rows change; worker 0 keeps the old weights and version
        collector.update_policy_weights_(WeightedPolicy(scale=5.0, offset=0.0), worker_ids=[1])
        third = collector.next()
        assert third is not None and versions(third) == [1, 2]
        assert (third["action"][0] == 0).all() and (third["action"][1] == 1).all()
        # no argument: pull from the policy given at construction (scale 3, offset 0: action 1)
        with torch.no_grad():
            policy.scale.fill_(3.0)
            policy.offset.bias.fill_(0.0)
        collector.update_policy_weights_(worker_ids=torch.device("cpu"))  # a device: its workers
        fourth = collector.next()
        assert fourth is not None and (fourth["action"] == 1).all() and versions(fourth) == [2, 3]
        # rejected updates name the key and shapes, change nothing, and collection goes on
        with pytest.raises(ValueError, match=r"'scale' has shape \(3,\), the module's has \(\)"):
            collector.update_policy_weights_(TensorDict({"scale": torch.full((3,), -9.0)}))
        with pytest.raises(KeyError, match="'nope'"):
            collector.update_policy_weights_(weights=TensorDict({"nope": torch.ones(1)}))
        known = r"unknown model id\(s\) \['critic'\]; known: \['policy', 'offset'\]"
        with pytest.raises(KeyError, match=known):
            collector.update_policy_weights_(policy, model_id="critic")
        for _ in range(10):
            batch = collector.next()
            assert batch is not None and (batch["action"] == 1).all() and versions(batch) == [2, 3]


def test_no_weight_sync_keeps_the_starting_weights() -> None:
    with MultiAsyncCollector("CartPole-v1", WeightedPolicy(scale=1.0), num_workers=2, frames_per_batch=4,
                             weight_sync_schemes={"policy": NoWeightSyncScheme()}) as collector:
        collector.update_policy_weights_(WeightedPolicy(scale=-1.0))
        for _ in range(4):
            batch = collector.next()
            assert batch is not None and (batch["action"] == 1).all() and (batch["policy_version"] == 0).all()
        assert collector.stats().policy_version == 0
    single = Collector("CartPole-v1", WeightedPolicy(scale=1.0), frames_per_batch=4,
                       weight_sync_schemes={"policy": NoWeightSyncScheme()})
    single.update_policy_weights_(WeightedPolicy(scale=-1.0))
    batch = single.next()
    assert batch is not None and (batch["action"] == 1).all() and (batch["policy_version"] == 0).all()
    single.shutdown()


def linear_weights(value: float) -> TensorDictBase:
    module = torch.nn.Linear(64, 64)
    torch.nn.init.constant_(module.weight, value)
    return as_weights(module)


def test_shared_memory_holds_one_copy_per_version_in_use() -> None:
    store = WeightStore({"policy": torch.nn.Linear(64, 64)}, num_workers=8)
    one_copy = store.weight_bytes()
    assert one_copy == (64 * 64 + 64) * 4
    receivers = [store.receiver(w) for w in range(8)]
    modules = [torch.nn.Linear(64, 64) for _ in range(8)]
    for value in (1.0, 2.0, 3.0):  # idle workers: the one copy is rewritten in place
        store.push({"policy": linear_weights(value)}, range(8))
    assert store.num_copies("policy") == 1 and store.weight_bytes() == one_copy
    store.push({"policy": linear_weights(4.0)}, [3])  # worker 3 differs: a second copy
    store.push({"policy": linear_weights(5.0)}, [3])  # still only worker 3: its copy is reused
    assert store.num_copies("policy") == 2 and store.weight_bytes() == 2 * one_copy
    requests = [store.payload(w) for w in range(8)]  # every worker asked for a batch
    for worker, (receiver, module) in enumerate(zip(receivers, modules, strict=True)):
        version = receiver.pull({"policy": module}, seen=-1, payload=requests[worker])
        assert version == (5 if worker == 3 else 3)
        assert (module.weight == (5.0 if worker == 3 else 3.0)).all()
        assert module.weight.is_shared()  # bound to the store's copy: no copy in the worker
    assert all(store.payload(w).copies is None for w in range(8))  # each copy was sent once
    # while the workers collect, both copies are in use: an update goes to a third, and the
    # workers keep running with the weights of their batch
    store.push({"policy": linear_weights(6.0)}, range(8))
    assert store.num_copies("policy") == 3
    assert all((module.weight == (5.0 if w == 3 else 3.0)).all() for w, module in enumerate(modules))
    for worker in range(8):
        store.release(worker)  # their reports arrived
    store.push({"policy": linear_weights(7.0)}, range(8))  # idle: written into a free copy
    assert store.num_copies("policy") == 3
    for worker, (receiver, module) in enumerate(zip(receivers, modules, strict=True)):
        seen = 5 if worker == 3 else 3
        assert receiver.pull({"policy": module}, seen=seen, payload=store.payload(worker)) == seen + 2
        assert (module.weight == 7.0).all()


def test_pipe_channel_pickles_each_update_once_and_sends_it_once() -> None:
    sender = PipeWeights({"policy": torch.nn.Linear(64, 64)}, num_workers=2)
    receivers = [sender.receiver(w) for w in range(2)]
    sender.push({"policy": linear_weights(7.0)}, range(2))
    payloads = [sender.payload(w) for w in range(2)]
    assert payloads[0] is not None and payloads[1] is not None and payloads[0][1] is payloads[1][1]
    assert sender.payload(0) is None  # delivered already
    module = torch.nn.Linear(64, 64)
    assert receivers[0].pull({"policy": module}, seen=0, payload=payloads[0]) == 1
    assert (module.weight == 7.0).all()
    assert receivers[0].pull({"policy": module}, seen=1, payload=payloads[0]) == 1  # a resent request


def test_a_standalone_sender_feeds_a_collector_and_its_workers() -> None:
    """A learner's SharedMem sender -> a collector registered as receiver -> its worker processes."""
    learner_policy = TiltPolicy()
    sender = SharedMemWeightSyncScheme()
    sender.init_on_sender(model_id="policy", model=learner_policy, num_workers=1)
    with MultiSyncCollector(make_cartpole, TiltPolicy(), num_workers=2, frames_per_batch=8,
                            seed=0) as collector:
        collector.register_scheme_receiver({"policy": sender.receiver(0)})
        first = collector.next()
        assert first is not None and versions(first) == [0, 0]
        with torch.no_grad():
            learner_policy.weight.mul_(-1)
        sender.send()
        second = collector.next()
        assert second is not None and versions(second) == [1, 1]
        flipped = (second["observation"] @ -TiltPolicy().weight.detach() > 0).long()
        assert torch.equal(second["action"], flipped)
        assert collector.cascade_execute("_receiver_schemes['policy'].receive") is None  # nothing newer
        assert collector.cascade_execute("weight_sync_schemes['policy'].strategy") == "tensordict"
        with pytest.raises(ValueError, match="not callable"):
            collector.cascade_execute("weight_sync_schemes['policy'].strategy", 1)
        with pytest.raises(ValueError, match="takes no weights when receiver schemes are registered"):
            collector.receive_weights(TiltPolicy())


def test_cascade_through_worker_processes_that_run_worker_processes() -> None:
    """collector_class=MultiSyncCollector: 2 workers of 2 processes each equal one process with the
    same 4 envs, and one update at the top reaches the innermost policies with its version."""
    from torchrl.weight_update import SharedMemWeightSyncScheme as TorchRLSharedMem

    with Collector(make_cartpole, TiltPolicy(), num_envs=4, frames_per_batch=40, seed=7) as single:
        expected = [single.next() for _ in range(2)]
    policy = TiltPolicy()
    with MultiSyncCollector(make_cartpole, policy, num_workers=2, collector_class=MultiSyncCollector,
                            collector_kwargs={"num_workers": 2}, frames_per_batch=40, seed=7,
                            weight_sync_schemes={"policy": TorchRLSharedMem()}) as collector:
        assert type(collector.weight_sync_schemes["policy"]) is SharedMemWeightSyncScheme  # TorchRL's name
        got = [collector.next() for _ in range(2)]
        for want, have in zip(expected, got, strict=True):
            assert want is not None and have is not None and have.batch_size == (4, 10)
            assert (drop_ids(want) == drop_ids(have)).all()
        with torch.no_grad():
            policy.weight.mul_(-1)
        collector.update_policy_weights_()
        third = collector.next()
        assert third is not None and (third["policy_version"] == 1).all()
        flipped = (third["observation"] @ -TiltPolicy().weight.detach() > 0).long()
        assert torch.equal(third["action"], flipped)


class CountingUpdater(WeightUpdaterBase):
    def __init__(self) -> None:
        self.calls: list[tuple[object, object]] = []
        self.init_args: tuple[object, ...] = ()

    def init(self, *args: object, **kwargs: object) -> None:
        self.init_args = args

    def push_weights(self, policy_or_weights: object = None, worker_ids: object = None) -> None:
        self.calls.append((policy_or_weights, worker_ids))


def test_legacy_weight_updater_is_called_instead_of_the_schemes() -> None:
    updater = CountingUpdater()
    with Collector("CartPole-v1", TiltPolicy(), frames_per_batch=4, weight_updater=updater) as collector:
        assert collector.weight_updater is updater and updater.collector is collector
        weights = as_weights(TiltPolicy())
        collector.update_policy_weights_(weights, worker_ids=0)
        collector.init_updater("server-address")
        assert updater.calls == [(weights, 0)] and updater.init_args == ("server-address",)
        with pytest.raises(ValueError, match="model_id and weights_dict are not supported"):
            collector.update_policy_weights_(weights, model_id="policy")
        with pytest.raises(ValueError, match="model_id and weights_dict are not supported"):
            collector.update_policy_weights_(weights_dict={"policy": weights})
    with pytest.raises(ValueError, match="weight_sync_schemes or the legacy weight_updater, not both"):
        Collector("CartPole-v1", frames_per_batch=4, weight_updater=updater,
                  weight_sync_schemes={"policy": SharedMemWeightSyncScheme()})


def test_receive_weights_forms_apply_to_the_running_policy() -> None:
    with Collector("CartPole-v1", TiltPolicy(), frames_per_batch=4, seed=0) as collector:
        collector.receive_weights(policy=TiltPolicy(sign=-1.0))
        batch = collector.next()
        assert batch is not None and (batch["policy_version"] == 1).all()
        chosen = (batch["observation"] @ TiltPolicy(sign=-1.0).weight.detach() > 0).long()
        assert torch.equal(batch["action"], chosen)
        with pytest.raises(ValueError, match="give the weights once"):
            collector.receive_weights(TiltPolicy(), weights=as_weights(TiltPolicy()))
        with pytest.raises(RuntimeError, match="worker_idx has not been set"):
            _ = collector.worker_idx
        collector.worker_idx = 3
        assert collector.worker_idx == 3


def test_scheme_errors_name_what_is_wrong() -> None:
    scheme = SharedMemWeightSyncScheme()
    schemes = {"policy": scheme}
    with Collector("CartPole-v1", TiltPolicy(), frames_per_batch=4, weight_sync_schemes=schemes) as first:
        assert scheme.initialized_on_sender and scheme.context is first
        with pytest.raises(RuntimeError, match="already initialized on the sender side"):
            Collector("CartPole-v1", TiltPolicy(), frames_per_batch=4, weight_sync_schemes=schemes)
        with pytest.raises(RuntimeError, match="both sender and receiver"):
            first.register_scheme_receiver({"policy": scheme})
    with pytest.raises(KeyError, match=r"\['critic'\] this collector does not have \(known: \['policy'\]"):
        Collector("CartPole-v1", frames_per_batch=4, weight_sync_schemes={"critic": NoWeightSyncScheme()})
    with pytest.raises(TypeError, match=r"schemes\['policy'\] must be a WeightSyncScheme, got str"):
        Collector("CartPole-v1", frames_per_batch=4, weight_sync_schemes={"policy": "shared"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="strategy='pickle' is not one of"):
        SharedMemWeightSyncScheme(strategy="pickle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="RayWeightSyncScheme cannot feed the workers of MultiSyncCollector"):
        MultiSyncCollector("CartPole-v1", TiltPolicy(), num_workers=2, frames_per_batch=4,
                           weight_sync_schemes={"policy": RayWeightSyncScheme()})
    policy = WeightedPolicy()
    with pytest.raises(ValueError, match="mixes"):
        MultiSyncCollector("CartPole-v1", policy, num_workers=2, frames_per_batch=4,
                           models={"offset": policy.offset},
                           weight_sync_schemes={"policy": SharedMemWeightSyncScheme(),
                                                "offset": MultiProcessWeightSyncScheme()})
    with pytest.raises(RuntimeError, match="feeds a collector's own workers"):
        MultiProcessWeightSyncScheme().init_on_sender(model_id="policy", model=TiltPolicy())
    with pytest.raises(RuntimeError, match="receivers are a collector's own workers"):
        MultiProcessWeightSyncScheme().init_on_receiver(model_id="policy", model=TiltPolicy())


def test_state_dict_strategy_moves_buffers_too() -> None:
    class Normalised(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.zeros(4))
            self.weight = torch.nn.Parameter(torch.tensor([0.3, 0.0, 1.0, 0.0]))

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return ((obs - self.mean) @ self.weight > 0).long()

    target = Normalised()
    target.mean.fill_(0.5)
    scheme = SharedMemWeightSyncScheme(strategy="state_dict")
    with Collector("CartPole-v1", Normalised(), frames_per_batch=4,
                   weight_sync_schemes={"policy": scheme}) as collector:
        collector.update_policy_weights_(target)
        assert collector.policy is not None and (collector.policy.mean == 0.5).all()


@pytest.mark.parametrize("collector_class", [MultiSyncCollector, MultiAsyncCollector])
def test_every_frame_is_chosen_by_the_weights_of_its_version_with_few_copies(
        collector_class: type[MultiSyncCollector]) -> None:
    """Updates while workers collect (prefetch, async): each frame's action is the one the weights
    of its stamped version choose (no worker ever runs on a copy being written), with at most one
    shared copy per version in use plus one."""
    def policy_of(version: int) -> TiltPolicy:
        return TiltPolicy(sign=1.0 if version % 2 == 0 else -1.0)  # every version flips the actions

    extra = {"prefetch": True} if collector_class is MultiSyncCollector else {}
    with collector_class(make_cartpole, policy_of(0), num_workers=2, frames_per_batch=16, seed=0,
                         **extra) as collector:
        checked_versions = set()
        for update in range(1, 9):
            batch = collector.next()
            assert batch is not None
            for row in range(batch.shape[0]):
                version = int(batch["policy_version"][row, 0])
                assert (batch["policy_version"][row] == version).all()
                chosen = policy_of(version)(batch["observation"][row])
                assert torch.equal(batch["action"][row], chosen), f"row {row}, version {version}"
                checked_versions.add(version)
            collector.update_policy_weights_(policy_of(update))
            # one copy per version a worker runs with, plus the one written: synchronous workers
            # all run the same version; asynchronous ones may each run another
            limit = 2 if collector_class is MultiSyncCollector else 3  # 2 workers
            assert collector._weights.num_copies("policy") <= limit  # type: ignore[attr-defined]
        assert len(checked_versions) >= 4


class DrivenReceiver:
    """A receiver scheme of the reference's API that is not rlcollect's (as TorchRL's): its sender
    calls the collector's _receive_weights_scheme(), and receive() applies the weights through the
    collector's update_policy_weights_, as TorchRL's schemes do."""

    def __init__(self, incoming: list[TensorDictBase]) -> None:
        self.incoming = incoming
        self.initialized_on_receiver = self.synchronized_on_receiver = False
        self.context: Any = None
        self.calls: list[str] = []

    def init_on_receiver(self, *, model_id: str, context: Any, worker_idx: int | None = None) -> None:
        self.context, self.initialized_on_receiver = context, True
        self.calls.append(f"init {model_id} {worker_idx}")

    def connect(self, *, worker_idx: int | None = None) -> None:
        self.synchronized_on_receiver = True
        self.calls.append("connect")

    def receive(self, timeout: float | None = None) -> TensorDictBase | None:
        self.calls.append("receive")
        if not self.incoming:
            return None
        weights = self.incoming.pop(0)
        self.context.update_policy_weights_(model_id="policy", policy_or_weights=weights)
        return weights

    def shutdown(self) -> None:
        self.calls.append("shutdown")


@pytest.mark.parametrize("cls", [Collector, MultiSyncCollector])
def test_a_driven_receiver_scheme_receives_only_when_its_sender_calls(cls: type) -> None:
    """Registered as the reference registers it; never polled before a batch (a TorchRL RPC
    receive would block there); _receive_weights_scheme() applies what it brings, one version."""
    incoming = [TensorDict({"scale": torch.tensor(-1.0)}, [])]
    scheme = DrivenReceiver(incoming)
    envs: Any = make_cartpole if cls is Collector else [make_cartpole]
    collector = cls(envs, WeightedPolicy(scale=1.0), frames_per_batch=8)
    collector.register_scheme_receiver({"policy": scheme})
    assert scheme.calls == ["init policy None", "connect"]
    first = collector.next()
    assert first is not None and (first["action"] == 1).all() and scheme.calls[-1] == "connect"
    collector._receive_weights_scheme(model_version=4)
    second = collector.next()
    assert second is not None and (second["action"] == 0).all() and (second["policy_version"] == 1).all()
    collector.shutdown()
    assert scheme.calls == ["init policy None", "connect", "receive", "shutdown"]
