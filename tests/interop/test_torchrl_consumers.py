"""Our batches go unchanged into TorchRL's value estimators, losses and replay buffers."""

from __future__ import annotations

import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")
# these envs lack the policy's transforms on purpose: rlcollect warns as TorchRL 0.14 does
pytestmark = pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs:FutureWarning")

from tensordict.nn import NormalParamExtractor, TensorDictModule  # noqa: E402
from torchrl.data import Bounded, LazyTensorStorage, ReplayBuffer, SliceSampler  # noqa: E402
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator  # noqa: E402
from torchrl.objectives import ClipPPOLoss, SACLoss  # noqa: E402
from torchrl.objectives.value import GAE  # noqa: E402

from rlcollect import Collector  # noqa: E402
from rlcollect.replay import flatten_batch  # noqa: E402


def pendulum_actor() -> ProbabilisticActor:
    net = torch.nn.Sequential(MLP(in_features=3, out_features=2, num_cells=[16]), NormalParamExtractor())
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
    return ProbabilisticActor(
        module, in_keys=["loc", "scale"], distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0}, return_log_prob=True,
    )


def test_gae_and_ppo_loss_read_our_batch() -> None:
    actor = pendulum_actor()
    critic = ValueOperator(MLP(in_features=3, out_features=1, num_cells=[16]), in_keys=["observation"])
    batch = Collector("Pendulum-v1", actor, frames_per_batch=64, num_envs=2, seed=0).next()
    assert batch is not None
    log_prob_keys = {k for k in batch.keys() if "log_prob" in str(k)}  # noqa: SIM118
    assert log_prob_keys, "the actor's log-probability lands in the batch"
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    with torch.no_grad():
        gae(batch)
    assert batch["advantage"].shape == (2, 32, 1) and torch.isfinite(batch["advantage"]).all()
    loss = ClipPPOLoss(actor, critic)
    losses = loss(batch.reshape(-1))
    total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
    total.backward()
    assert all(p.grad is not None for p in actor.parameters())


def test_sac_loss_reads_our_batch() -> None:
    actor = pendulum_actor()
    qvalue = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[16]),
                           in_keys=["observation", "action"])
    batch = Collector("Pendulum-v1", actor, frames_per_batch=32, seed=0).next()
    assert batch is not None
    loss = SACLoss(actor, qvalue, action_spec=Bounded(-2.0, 2.0, shape=(1,)))  # no TorchRL env to ask
    losses = loss(batch.reshape(-1))
    assert torch.isfinite(losses["loss_actor"]) and torch.isfinite(losses["loss_qvalue"])


def test_torchrl_replay_buffer_stores_and_samples_our_frames() -> None:
    batch = Collector("CartPole-v1", None, frames_per_batch=40, num_envs=2, seed=0).next()
    assert batch is not None
    buffer = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=8)
    buffer.extend(flatten_batch(batch))
    assert len(buffer) == 40
    sample = buffer.sample()
    assert sample["observation"].shape == (8, 4) and sample["next", "done"].dtype == torch.bool
    slices = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=8,
                          sampler=SliceSampler(slice_len=4, traj_key=("collector", "traj_ids")))
    slices.extend(flatten_batch(batch))
    sample = slices.sample()
    ids = sample["collector", "traj_ids"].view(2, 4)
    assert (ids == ids[:, :1]).all()  # each slice stays within one trajectory


@pytest.mark.timeout(120)
@pytest.mark.parametrize("multi", [False, True])
def test_probabilistic_actor_on_gym_env_through_rlcollect_torchrl_into_ppo(multi: bool) -> None:
    """TorchRL objects only, one import changed: a ProbabilisticActor on GymEnv("CartPole-v1")
    (one-hot actions) through rlcollect.torchrl's Collector / MultiSyncCollector, then GAE and
    ClipPPOLoss on the batches, unchanged."""
    from torchrl.envs import GymEnv
    from torchrl.modules import OneHotCategorical

    from rlcollect.torchrl import Collector as TorchRLLayoutCollector
    from rlcollect.torchrl import MultiSyncCollector as TorchRLLayoutMultiSync

    spec = GymEnv("CartPole-v1").action_spec
    logits = TensorDictModule(MLP(in_features=4, out_features=2, num_cells=[16]), in_keys=["observation"],
                              out_keys=["logits"])
    actor = ProbabilisticActor(logits, in_keys=["logits"], distribution_class=OneHotCategorical,
                               return_log_prob=True, spec=spec)
    critic = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[16]), in_keys=["observation"])
    if multi:
        collector = TorchRLLayoutMultiSync([lambda: GymEnv("CartPole-v1")] * 2, actor, frames_per_batch=64,
                                           total_frames=64)
    else:
        collector = TorchRLLayoutCollector(GymEnv("CartPole-v1"), actor, frames_per_batch=64, total_frames=64)
    with collector:
        batch = next(iter(collector))
    assert batch.batch_size == ((2, 32) if multi else (64,))  # TorchRL's: "stack" by worker, [T] for one env
    assert batch["action"].dtype == torch.int64
    assert torch.equal(batch["action"].sum(-1), torch.ones(batch.shape, dtype=torch.int64))
    assert "action_log_prob" in batch and not batch["done"].any()
    with torch.no_grad():
        GAE(gamma=0.99, lmbda=0.95, value_network=critic)(batch)
    assert batch["advantage"].shape == (*batch.shape, 1) and torch.isfinite(batch["advantage"]).all()
    losses = ClipPPOLoss(actor, critic)(batch.reshape(-1))
    (losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]).backward()
    assert all(p.grad is not None for p in actor.parameters())
