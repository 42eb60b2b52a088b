"""A TensorDict policy's carried state (an extra it reads back at the next step) goes from each
step to the next, per env, across batches, in workers and on an asynchronous pool, as TorchRL's
collectors carry root keys from one step to the next."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rlcollect import Collector, MultiSyncCollector
from tests.envs_for_tests import make_cartpole

pytestmark = pytest.mark.timeout(120)


class Counting(TensorDictModuleBase):
    """Pushes right unless the pole leans left; counts its own calls per env in ``_count`` (read
    without being listed, as TorchRL's exploration modules read their state)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_keys, self.out_keys = ["observation"], ["action", "_count"]

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        count = td.get("_count", None)
        if count is None:
            count = torch.zeros(td.batch_size, dtype=torch.int64)
        td.set("_count", count + 1)
        td.set("action", (td.get("observation")[..., 2] > 0).long())
        return td


def test_each_step_reads_what_the_step_before_wrote_across_batches() -> None:
    with Collector(make_cartpole, Counting(), num_envs=2, frames_per_batch=10, total_frames=30) as collector:
        batches = [batch.clone() for batch in collector]
    counts = torch.cat([b["_count"] for b in batches], 1)
    assert torch.equal(counts, torch.arange(1, 16).expand(2, 15))  # kept across episode ends too


def test_workers_carry_their_own_envs_state() -> None:
    with MultiSyncCollector(make_cartpole, Counting(), num_workers=2, num_envs_per_worker=2,
                            frames_per_batch=20, total_frames=40) as collector:
        counts = torch.cat([b["_count"] for b in collector], 1)
    assert torch.equal(counts, torch.arange(1, 11).expand(4, 10))


def test_an_async_pool_carries_each_envs_state() -> None:
    """On an asynchronous EnvPool the policy also acts on each episode's final observation (the
    action EnvPool drops): each env's count goes up by one per frame within an episode and by two
    across an episode's end."""
    pytest.importorskip("envpool", reason="needs envpool: pip install rlcollect[envpool]")
    with Collector("envpool:CartPole-v1", Counting(), num_envs=4, create_env_kwargs={"batch_size": 2},
                   frames_per_batch=40, total_frames=120, seed=0) as collector:
        batches = [batch.clone() for batch in collector]
    envs = torch.cat([b["collector", "env_ids"].reshape(-1) for b in batches]).numpy()
    counts = torch.cat([b["_count"].reshape(-1) for b in batches]).numpy()
    done = torch.cat([b["next", "done"].reshape(-1) for b in batches]).numpy()
    for env in range(4):
        mine = envs == env
        assert counts[mine][0] == 1
        steps = np.diff(counts[mine])
        assert np.array_equal(steps, np.where(done[mine][:-1], 2, 1))


def test_torchrl_ornstein_uhlenbeck_noise_equals_torchrls_collector() -> None:
    """TorchRL's Ornstein-Uhlenbeck exploration (state in ``_ou_prev_noise``): the same actions as
    TorchRL's own collector, frame for frame (white noise if the state were not carried)."""
    pytest.importorskip("torchrl", reason="needs torchrl: pip install rlcollect[torchrl]")
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.collectors import Collector as TorchRLCollector
    from torchrl.data import Composite
    from torchrl.envs import GymEnv, InitTracker, TransformedEnv
    from torchrl.modules import OrnsteinUhlenbeckProcessModule

    from rlcollect.torchrl import Collector as DropIn

    actions = []
    for kind in (TorchRLCollector, DropIn):
        env = TransformedEnv(GymEnv("Pendulum-v1"), InitTracker())
        actor = TensorDictModule(lambda obs: torch.zeros(*obs.shape[:-1], 1), in_keys=["observation"],
                                 out_keys=["action"])
        policy = TensorDictSequential(actor, OrnsteinUhlenbeckProcessModule(
            spec=Composite({"action": env.action_spec})))
        env.set_seed(0)
        torch.manual_seed(0)
        collector = kind(env, policy, frames_per_batch=100, total_frames=300)
        actions.append(torch.cat([b["action"] for b in collector]))
        collector.shutdown()
    assert torch.equal(actions[0], actions[1])
    noise = actions[1][:, 0]
    assert float(torch.corrcoef(torch.stack([noise[:-1], noise[1:]]))[0, 1]) > 0.8


def test_torchrl_recurrent_policy_equals_torchrls_collector() -> None:
    """TorchRL's ``LSTMModule`` with its primer and ``InitTracker``: the policy's next state goes
    to the env's step as in TorchRL's collectors, so the batches hold the same states, logits and
    actions, across episode ends (``is_init`` is stored as the bool TorchRL gives)."""
    pytest.importorskip("torchrl", reason="needs torchrl: pip install rlcollect[torchrl]")
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.collectors import Collector as TorchRLCollector
    from torchrl.envs import Compose, GymEnv, InitTracker, TransformedEnv
    from torchrl.modules import LSTMModule

    from rlcollect.torchrl import Collector as DropIn

    keys = ["action", "logits", "is_init", "recurrent_state_h", "recurrent_state_c",
            ("next", "recurrent_state_h"), ("next", "done")]
    batches = []
    for kind in (TorchRLCollector, DropIn):
        torch.manual_seed(0)
        lstm = LSTMModule(input_size=4, hidden_size=8, in_key="observation", out_key="embed")
        policy = TensorDictSequential(
            lstm, TensorDictModule(torch.nn.Linear(8, 2), in_keys=["embed"], out_keys=["logits"]),
            TensorDictModule(lambda logits: logits.argmax(-1), in_keys=["logits"], out_keys=["action"]))
        env = TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True),
                             Compose(InitTracker(), lstm.make_tensordict_primer()))
        env.set_seed(0)
        collector = kind(env, policy, frames_per_batch=60, total_frames=120)
        batches.append(torch.cat([b.select(*keys) for b in collector]))
        collector.shutdown()
    theirs, ours = batches
    assert ours["next", "done"].sum() >= 2  # episodes end inside the batches
    assert ours["is_init"].dtype == torch.bool
    for key in keys:
        assert torch.allclose(ours[key].float(), theirs[key].float(), atol=1e-6), key
    assert ours["recurrent_state_h"][1:].abs().sum() > 0  # the state is carried, not zeros
