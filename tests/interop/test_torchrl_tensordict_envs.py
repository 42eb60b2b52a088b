"""TorchRL envs whose data the batch buffers cannot hold (several action / reward / done keys in
nested groups, 2-D batch sizes, heterogeneous agents) collect tensordict by tensordict: the same
frames as a plain TorchRL loop, with the engine's trajectory ids, statistics and checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")
# these envs lack the policy's transforms on purpose: rlcollect warns as TorchRL 0.14 does
pytestmark = pytest.mark.filterwarnings("ignore:the env lacks transforms the policy needs:FutureWarning")

from tensordict import LazyStackedTensorDict, TensorDictBase  # noqa: E402
from torchrl.testing.mocking_classes import (  # noqa: E402
    CountingEnvCountPolicy,
    HeterogeneousCountingEnv,
    HeterogeneousCountingEnvPolicy,
    MultiKeyCountingEnv,
    MultiKeyCountingEnvPolicy,
    NestedCountingEnv,
)

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector  # noqa: E402
from rlcollect.data.checks import BadDataError  # noqa: E402
from rlcollect.envs.factory import make_env_batch  # noqa: E402
from rlcollect.envs.torchrl_stepped import TorchRLEnv  # noqa: E402
from rlcollect.envs.torchrl_tensordict import TensorDictEnv  # noqa: E402
from rlcollect.torchrl import Collector as TorchRLLayoutCollector  # noqa: E402
from rlcollect.torchrl import MultiSyncCollector as TorchRLLayoutMultiSync  # noqa: E402


def nested_env() -> tuple[Any, Any]:
    env = NestedCountingEnv(batch_size=(2,), max_steps=3, nested_dim=3)
    return env, CountingEnvCountPolicy(env.full_action_spec[env.action_key], env.action_key)


def multikey_env() -> tuple[Any, Any]:
    env = MultiKeyCountingEnv(batch_size=(2, 1), max_steps=3)
    return env, MultiKeyCountingEnvPolicy(env.full_action_spec, deterministic=True)


def plain_loop(env: Any, policy: Any, steps: int, batches: int) -> list[TensorDictBase]:
    """TorchRL's collector loop, written plainly: act, step and reset, keep the frame."""
    root, out = env.reset(), []
    for _ in range(batches):
        frames = []
        for _ in range(steps):
            root = policy(root)
            frame, root = env.step_and_maybe_reset(root)
            frames.append(frame.clone())
        out.append(torch.stack(frames, -1))
    return out


def reference_ids(ends: np.ndarray) -> np.ndarray:
    """Trajectory ids of ``ends [N, T]`` batches in a row: env ``i`` starts with ``i``; after an
    end, the next free id, handed out step by step, env by env."""
    ids, current, free = np.empty_like(ends, dtype=np.int64), np.arange(ends.shape[0]), ends.shape[0]
    for t in range(ends.shape[1]):
        ids[:, t] = current
        for env in np.nonzero(ends[:, t])[0]:
            current[env], free = free, free + 1
    return ids


def ends_of(batch: TensorDictBase, env: Any) -> np.ndarray:
    """``[N, T]``: any done entry of the frame's next, any agent."""
    dims = len(env.batch_size) + 1
    end = torch.zeros(batch.batch_size[:dims], dtype=torch.bool)
    for key in env.done_keys:
        flag = batch.get(("next", *((key,) if isinstance(key, str) else key)))
        end |= flag.reshape(*flag.shape[:dims], -1).any(-1)
    return end.reshape(-1, batch.batch_size[dims - 1]).numpy()


@pytest.mark.parametrize("make", [nested_env, multikey_env], ids=["nested", "multikey"])
@pytest.mark.parametrize("collector_class", [Collector, TorchRLLayoutCollector], ids=["native", "torchrl"])
def test_batches_equal_a_plain_torchrl_loop(make: Any, collector_class: Any) -> None:
    env, policy = make()
    ref_env, ref_policy = make()
    n = env.batch_size.numel()
    steps = 5
    collector = collector_class(env, policy, frames_per_batch=steps * n, total_frames=3 * steps * n)
    batches = [batch.clone() for batch in collector]
    collector.shutdown()
    references = plain_loop(ref_env, ref_policy, steps, 3)
    assert len(batches) == 3
    for ours, ref in zip(batches, references, strict=True):
        assert ours.batch_size == (*env.batch_size, steps) and ours.names[-1] == "time"
        keys = set(ref.keys(True, True))
        assert keys <= set(ours.keys(True, True))
        for key in keys:
            torch.testing.assert_close(ours.get(key), ref.get(key), msg=f"{key}")
    ends = np.concatenate([ends_of(ref, ref_env) for ref in references], axis=1)
    assert ends.any()  # episodes end inside the batches
    ids = torch.cat([b["collector", "traj_ids"].reshape(n, steps) for b in batches], 1).numpy()
    np.testing.assert_array_equal(ids, reference_ids(ends))
    stats = collector.stats()
    assert stats.frames == 3 * steps * n and stats.batches == 3 and stats.episodes == int(ends.sum())
    version = batches[0].get("policy_version", None)
    assert (version is None) == (collector_class is TorchRLLayoutCollector)  # TorchRL's: not tracked


def test_which_torchrl_envs_go_tensordict_by_tensordict() -> None:
    from torchrl.envs import GymEnv

    assert isinstance(make_env_batch(GymEnv("CartPole-v1", categorical_action_encoding=True)),
                      type(make_env_batch(GymEnv("CartPole-v1"))))  # plain envs keep the engine's path
    assert isinstance(make_env_batch(NestedCountingEnv(nest_done=False, nest_reward=False,
                                                       nest_obs_action=False)), TorchRLEnv)
    for env, reason in [
        (NestedCountingEnv(), "action keys [('data', 'action')]"),
        (MultiKeyCountingEnv(batch_size=(2, 1)), "batch_size (2, 1)"),
        (HeterogeneousCountingEnv(), "action keys [('lazy', 'action')]"),
    ]:
        envs = make_env_batch(env)
        assert isinstance(envs, TensorDictEnv) and envs.reason.startswith(reason), envs.reason


def test_heterogeneous_agents_are_lazily_stacked() -> None:
    env = HeterogeneousCountingEnv(max_steps=3, batch_size=(2,))
    collector = Collector(env, HeterogeneousCountingEnvPolicy(env.input_spec["full_action_spec"]),
                          frames_per_batch=16)
    batch = collector.next()
    collector.shutdown()
    assert batch.batch_size == (2, 8)
    agents = batch.get("lazy")
    assert isinstance(agents, LazyStackedTensorDict) and agents.batch_size == (2, 8, env.n_nested_dim)
    for i in range(env.n_nested_dim):  # each agent's own observation shape, every action 1
        assert agents[..., i][f"tensor_{i}"].shape[:2] == (2, 8)
        assert (agents[..., i]["action"] == 1).all()


def test_a_collector_cut_and_a_step_limit() -> None:
    env = NestedCountingEnv(batch_size=(2,), max_steps=10, nested_dim=3)
    policy = CountingEnvCountPolicy(env.full_action_spec[env.action_key], env.action_key)
    collector = Collector(env, policy, frames_per_batch=8, set_truncated=True)
    first, second = collector.next().clone(), collector.next().clone()
    collector.shutdown()
    assert first["next", "data", "done"][:, -1].all()  # the cut ends every trajectory for the learner
    assert not first["next", "data", "done"][:, :-1].any() and collector.stats().episodes == 0
    env = NestedCountingEnv(batch_size=(2,), max_steps=3, nested_dim=3).add_truncated_keys()
    collector = Collector(env, policy, frames_per_batch=8, set_truncated=True)  # ends at the last step
    batch = collector.next()
    collector.shutdown()
    last = batch["next", "data"][:, -1]
    assert last["terminated"].all() and last["truncated"].all() and last["done"].all()  # as TorchRL
    assert not batch["next", "data", "truncated"][:, :-1].any()
    # the cut leaves the env's episode going on under its id, as TorchRL 0.14's ids do
    assert torch.equal(second["collector", "traj_ids"][:, 0], first["collector", "traj_ids"][:, -1])
    env = MultiKeyCountingEnv(batch_size=(2,), max_steps=10)
    collector = Collector(env, MultiKeyCountingEnvPolicy(env.full_action_spec, deterministic=True),
                          frames_per_batch=8, max_frames_per_traj=3)  # TorchRL's StepCounter
    batch = collector.next()
    collector.shutdown()
    assert batch["next", "truncated"][..., 0].tolist() == [[False, False, True, False]] * 2
    assert batch["collector", "traj_ids"].tolist() == [[0, 0, 0, 2], [1, 1, 1, 3]]
    assert collector.stats().episodes == 2 and collector.stats().mean_length == 3


def test_a_nan_is_an_error_naming_its_key_env_and_step() -> None:
    """A NaN the policy writes is an error; an inf it writes beside its action is kept (the logits
    of masked actions), as in the native engine; every float entry the env writes must be finite."""
    env, policy = nested_env()
    calls = []

    def noisy(root: TensorDictBase, bad: float = torch.nan) -> TensorDictBase:
        calls.append(1)
        root = policy(root)
        noise = torch.zeros(2, 1)
        if len(calls) == 3:
            noise[1] = bad
        return root.set("noise", noise)

    collector = Collector(env, noisy, frames_per_batch=8)
    with pytest.raises(BadDataError, match=r"the noise of env 1 at step 2 of batch 0 holds NaN"):
        collector.next()
    collector.shutdown()
    calls.clear()
    with Collector(nested_env()[0], lambda root: noisy(root, -torch.inf), frames_per_batch=8) as kept:
        assert torch.isinf(kept.next()["noise"]).sum() == 1
    keys = TensorDictEnv(nested_env()[0], "nested").env_keys
    env_writes = {("data", "states"), ("data", "action"), ("next", "data", "reward"),
                  ("next", "data", "done")}
    assert env_writes <= keys
    assert ("noise",) not in keys


def make_nested_env() -> Any:
    return nested_env()[0]


def make_nested_policy() -> Any:
    return nested_env()[1]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cat_results", ["stack", 0, -1])
def test_worker_processes_send_their_batches_whole(cat_results: Any) -> None:
    """Two workers of a nested env: each worker's frames are the plain loop's (counting envs are
    deterministic), grouped as ``cat_results`` says; trajectory ids are unique over the workers."""
    steps, references = 4, plain_loop(*nested_env(), 4, 3)
    collector = TorchRLLayoutMultiSync([make_nested_env] * 2, policy_factory=make_nested_policy,
                                       frames_per_batch=2 * 2 * steps, total_frames=3 * 16,
                                       cat_results=cat_results)
    batches = [batch.clone() for batch in collector]
    collector.shutdown()
    assert len(batches) == 3
    ids = []
    for batch, ref in zip(batches, references, strict=True):
        if cat_results == "stack":
            assert batch.batch_size == (2, 2, steps)
            parts = batch.unbind(0)
        elif cat_results == 0:
            assert batch.batch_size == (4, steps)
            parts = batch.split(2, 0)
        else:
            assert batch.batch_size == (2, 2 * steps)
            parts = batch.split(steps, -1)
        assert batch.names[-1] == "time"
        for part in parts:
            for key in ref.keys(True, True):
                torch.testing.assert_close(part.get(key), ref.get(key), msg=f"{key}")
            ids.append(part["collector", "traj_ids"])
    first = torch.stack([i[:, 0] for i in ids[:2]])  # batch 0, both workers: ids 0..3, no repeats
    assert sorted(first.flatten().tolist()) == [0, 1, 2, 3]
    starts = torch.cat([i.flatten() for i in ids]).unique()
    assert len(starts) == len(set(starts.tolist()))


@pytest.mark.timeout(120)
def test_asynchronous_workers_each_send_their_own_batch() -> None:
    env, _ = nested_env()
    collector = MultiAsyncCollector([make_nested_env] * 2, policy_factory=make_nested_policy,
                                    frames_per_batch=8, total_frames=32)
    batches = [batch.clone() for batch in collector]
    stats = collector.stats()
    collector.shutdown()
    reference = plain_loop(*nested_env(), 4, 4)
    assert len(batches) == 4 and stats.frames == 32
    counts = {0: 0, 1: 0}
    for batch in batches:
        assert batch.batch_size == (2, 4) and batch.names == [None, "time"]
        worker = int(batch["collector", "traj_ids"][0, 0]) % 2  # ids are local * workers + worker
        torch.testing.assert_close(batch["next", "data", "states"],
                                   reference[counts[worker]]["next", "data", "states"])
        counts[worker] += 1
    assert env.batch_size == (2,)


def episodes_by_hand(reference: TensorDictBase, env: Any) -> dict[int, TensorDictBase]:
    """The complete episodes of a plain loop's ``[N, T]`` frames, by trajectory id."""
    ends, episodes = ends_of(reference, env), {}
    ids = reference_ids(ends)
    for row in range(ids.shape[0]):
        for traj in np.unique(ids[row]):
            frames = np.nonzero(ids[row] == traj)[0]
            if ends[row, frames[-1]]:
                episodes[int(traj)] = reference[row, frames[0] : frames[-1] + 1]
    return episodes


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls", [Collector, MultiAsyncCollector, TorchRLLayoutCollector])
def test_trajs_per_batch_yields_the_complete_episodes(cls: Any) -> None:
    """One complete episode a batch, each the plain loop's frames with its id (the ends: any agent's
    done entry; Collector refused trajs_per_batch here, the workers raised TypeError)."""
    env, policy = nested_env()
    episodes = episodes_by_hand(torch.cat(plain_loop(env, policy, 4, 6), -1), env)
    source = [make_nested_env] if cls is MultiAsyncCollector else make_nested_env
    collector = cls(source, make_nested_policy(), frames_per_batch=8, total_frames=48, trajs_per_batch=1,
                    traj_format="cat")
    with collector:
        got = [batch.clone() for batch in collector]
    assert len(got) >= 6
    for episode in got:
        traj = int(episode["collector", "traj_ids"][0])
        want = episodes[traj]
        assert episode.batch_size == want.batch_size
        for key in want.keys(True, True):
            if key[0] != "collector":
                assert torch.equal(episode[key], want[key]), key


def test_what_is_refused_names_the_reason() -> None:
    with pytest.raises(ValueError, match=r"policy server reads each env's step from the batch buffers, "
                                         r"which this TorchRL env's data does not fit \(action keys"):
        AsyncBatchedCollector([make_nested_env], make_nested_policy(), frames_per_batch=8)
    with pytest.raises(ValueError, match=r"preemptive_threshold stops workers inside the batch buffers"):
        MultiSyncCollector([make_nested_env] * 2, make_nested_policy(), frames_per_batch=8,
                           preemptive_threshold=0.5)
    env, _ = nested_env()
    with pytest.raises(TypeError, match="returned Tensor at step 0; with this TorchRL env"):
        Collector(env, lambda root: torch.zeros(2), frames_per_batch=4).next()
    env, policy = nested_env()
    with Collector(env, policy, frames_per_batch=4) as collector, \
            pytest.raises(NotImplementedError, match="fake_tensordict is not available: the batches are "
                                                     "the TorchRL env's own tensordicts"):
        collector.fake_tensordict()  # known once collected: no batch layout holds them


@pytest.mark.timeout(300)
def test_ray_actors_send_their_batches_whole(ray_session: None) -> None:
    from rlcollect import RayCollector

    with RayCollector(make_nested_env, make_nested_policy(), num_collectors=2,
                      frames_per_batch=16, total_frames=32) as collector:
        batches = [batch.clone() for batch in collector]
    reference = plain_loop(*nested_env(), 4, 1)[0]
    assert len(batches) == 2
    for batch in batches:  # each actor's batch: [2 actors, 2 envs, T] stacked
        for part in batch.reshape(-1, *batch.batch_size[-2:]).unbind(0):
            torch.testing.assert_close(part["next", "data", "states"], reference["next", "data", "states"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("inner", ["MultiSyncCollector", "MultiAsyncCollector"])
def test_ray_actors_running_multi_collectors_as_torchrl_builds_them(ray_session: None, inner: str) -> None:
    """``RayCollector(collector_class=MultiAsyncCollector or MultiSyncCollector,
    num_workers_per_collector=2)``, as TorchRL builds it: each actor runs 2 processes, each stepping
    a copy of the env; the frames asked for, and within each env every step follows the one before."""
    from torchrl.envs import GymEnv

    import rlcollect.torchrl as wing

    def make_env() -> Any:
        return GymEnv("CartPole-v1")

    with wing.RayCollector([make_env], None, collector_class=getattr(wing, inner), frames_per_batch=64,
                           num_workers_per_collector=2, total_frames=256, seed=0) as collector:
        batches = [batch.clone() for batch in collector]
    assert sum(batch.numel() for batch in batches) == 256
    assert all(batch.batch_size == (2, 32) for batch in batches)  # an actor's batch: its 2 processes' envs
    ids = torch.cat([batch["collector", "traj_ids"] for batch in batches], dim=-1)
    assert set(ids[0].tolist()).isdisjoint(ids[1].tolist())  # two envs, in two processes
    observation = torch.cat([batch["observation"] for batch in batches], dim=1)
    following = torch.cat([batch["next", "observation"] for batch in batches], dim=1)
    done = torch.cat([batch["next", "done"] for batch in batches], dim=1)[..., 0]
    continues = ~done[:, :-1]
    assert torch.equal(observation[:, 1:][continues], following[:, :-1][continues])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_batch_check_finds_nan_and_infinity_as_the_elementwise_test_does(dtype: torch.dtype) -> None:
    from rlcollect.rollout.tensordict_loop import _clean

    for bad in (torch.nan, torch.inf, -torch.inf, None):
        value = torch.randn(64, 3, 5).to(dtype).transpose(0, 1)  # not contiguous, as a stacked leaf may be
        if bad is not None:
            value[2, 17, 4] = bad
        assert _clean(value, finite=True) == bool(value.isfinite().all()), bad
        assert _clean(value, finite=False) == (not bool(value.isnan().any())), bad
    assert _clean(torch.zeros(0, 3, dtype=dtype), finite=True)
