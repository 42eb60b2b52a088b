"""A TorchRL env that returns its state tensor itself and changes it in place at the next step
(a common way to write ``_step``) cannot give each frame its own step's values when its frames are
kept tensordict by tensordict (a group of agents): TorchRL 0.14's collectors store the env's last
state in every frame. rlcollect copies what the env returns at each step of the first batch and
compares: such an env is a ``BadDataError`` naming the entry and the fix; the same env returning
a copy gives every frame its own values. (A flat env's steps are copied into the batch buffers:
it is right either way.)
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("torchrl", reason="the torchrl extra is not installed")

from tensordict import TensorDict, TensorDictBase  # noqa: E402
from torchrl.data import Binary, Categorical, Composite, Unbounded  # noqa: E402
from torchrl.envs import EnvBase  # noqa: E402
from torchrl.testing.mocking_classes import MultiAgentCountingEnv  # noqa: E402

from rlcollect import Collector, MultiSyncCollector  # noqa: E402
from rlcollect.data.checks import BadDataError  # noqa: E402
from rlcollect.envs.torchrl_tensordict import TensorDictEnv  # noqa: E402
from rlcollect.rollout.engine import RolloutSpec  # noqa: E402
from rlcollect.rollout.tensordict_loop import TensorDictRollout  # noqa: E402
from rlcollect.torchrl import Collector as WingCollector  # noqa: E402

pytestmark = pytest.mark.timeout(120)
LENGTH = 5  # steps per episode


class InPlaceAgents(EnvBase):
    """Two agents in a group; their observation is the env's state buffer, returned as it is and
    incremented in place at each step (``[step in the episode] * 3`` for each agent)."""

    def __init__(self, copy: bool = False) -> None:
        super().__init__()
        self.copy = copy
        self.observation_spec = Composite(agents=Composite(observation=Unbounded((2, 3)), shape=(2,)))
        self.action_spec = Composite(agents=Composite(action=Binary(n=1, shape=(2, 1)), shape=(2,)))
        self.reward_spec = Composite(agents=Composite(reward=Unbounded((2, 1)), shape=(2,)))
        self.done_spec = Composite(done=Categorical(2, (1,), dtype=torch.bool),
                                   terminated=Categorical(2, (1,), dtype=torch.bool))
        self.register_buffer("state", torch.zeros(2, 3))

    def _set_seed(self, seed: int | None) -> None:
        return None

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        self.state.zero_()
        return self._out(reward=False)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.state += 1
        return self._out(reward=True)

    def _out(self, reward: bool) -> TensorDictBase:
        done = self.state[:1, 0] >= LENGTH
        agents = TensorDict({"observation": self.state.clone() if self.copy else self.state}, batch_size=[2])
        if reward:
            agents["reward"] = torch.ones(2, 1)
        return TensorDict({"agents": agents, "done": done, "terminated": done.clone()}, batch_size=[])


def copying() -> InPlaceAgents:
    return InPlaceAgents(copy=True)


def check_frames(batches: list[TensorDictBase]) -> None:
    """Step ``t`` of the run: observation ``t % LENGTH``, next observation one more."""
    step = 0
    for batch in batches:
        obs = batch["agents", "observation"].reshape(-1, batch.shape[-1], 2, 3)
        nxt = batch["next", "agents", "observation"].reshape(obs.shape)
        for t in range(obs.shape[1]):
            expected = float(step % LENGTH)
            assert (obs[:, t] == expected).all(), f"step {step}: observation {obs[:, t, 0, 0].tolist()}"
            assert (nxt[:, t] == expected + 1).all(), f"step {step}: next {nxt[:, t, 0, 0].tolist()}"
            step += 1
    assert step == 24


@pytest.mark.parametrize("collector", [Collector, WingCollector])
def test_collector(collector: Any) -> None:
    with collector(copying, None, frames_per_batch=8, total_frames=24) as c:
        check_frames([batch.clone() for batch in c])
    bad = collector(InPlaceAgents, None, frames_per_batch=8, total_frames=24)
    with bad, pytest.raises(BadDataError, match=r"'agents', 'observation'\).*changed by the env"):
        next(iter(bad))


def test_workers() -> None:
    with MultiSyncCollector(copying, None, num_workers=2, frames_per_batch=16, total_frames=48) as c:
        batches = [batch.clone() for batch in c]
    for worker in range(2):
        check_frames([batch[worker : worker + 1] for batch in batches])
    bad = MultiSyncCollector(InPlaceAgents, None, num_workers=2, frames_per_batch=16, total_frames=48,
                             max_worker_restarts=0)
    with bad, pytest.raises(BadDataError, match="changed by the env"):
        next(iter(bad))


def test_watched_first_batch_only() -> None:
    """The first batch is copied and compared; the next are not (and MultiAgentCountingEnv, which
    returns new tensors, passes)."""
    rollout = TensorDictRollout(RolloutSpec(None), TensorDictEnv(MultiAgentCountingEnv(n_agents=2), "agents"))
    rollout.set_seed(0)
    assert rollout._watch
    first = rollout.collect(6)
    assert not rollout._watch
    assert rollout.collect(6).batch_size == first.batch_size == (6,)


def test_not_watched_without_checks() -> None:
    """check="off": no check at all, this one included (the frames are then the env's last state)."""
    with Collector(InPlaceAgents, None, frames_per_batch=8, total_frames=8, check="off") as c:
        assert next(iter(c)).batch_size == (8,)


def test_an_episode_cut_by_reset_at_each_iter_counts_in_no_later_one() -> None:
    """8 steps a batch, each batch from a reset: one 5-step episode ends in each, and the 3 steps
    after it are abandoned at the next reset, not added to the next batch's episode."""
    with Collector(copying, None, frames_per_batch=8, total_frames=24, reset_at_each_iter=True) as c:
        batches = [batch.clone() for batch in c]
        table = c.episodes()
    assert all(bool(batch["next", "done"][-1]) for batch in batches)  # each batch ends cut
    assert table["length"].tolist() == [LENGTH] * 3
