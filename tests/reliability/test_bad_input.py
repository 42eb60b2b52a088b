"""The bad-input table: every bad argument, weight update, CLI flag and env / policy datum is refused
with a clear error.

Each case is ``(build, error, pattern)``: ``build()`` makes the bad thing (a constructor call, an
``update_policy_weights_`` call, a CLI run, a short collection), ``error`` is the exception expected
(``ValueError`` for a bad value, ``TypeError`` for a bad type; a tuple where either is fair) and
``pattern`` a regex the message must match: the argument's name and the value, or for env / policy
data the env index, the step and expected vs actual. Construction errors need no worker process:
the multi-process collectors are built with 1 worker, ``start_method="forkserver"`` (fresh
processes that unpickle what they are sent, as with spawn, without importing torch again each
time) and tiny batches, and refuse before starting any.

Seeds: an int in ``[0, 2**63)`` (numpy integers included), see ``rlcollect.collectors.checks.SEED_LIMIT``.
"""

from __future__ import annotations

import collections
import contextlib
import io
import re
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from tensordict import TensorDict

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.cli.main import main as cli_main
from rlcollect.replay import ReplayBuffer
from rlcollect.weights import SharedMemWeightSyncScheme
from tests.reliability.bad_input_trust import ENTRIES as TRUST_ENTRIES

pytestmark = pytest.mark.timeout(60)

AT = 3  # the env's step count (from 1) at which its value goes bad: batch step t = AT - 1
STEP = AT - 1
CartPole = "CartPole-v1"


def names(*parts: str) -> str:
    """A regex matching a message that holds every one of ``parts`` (regexes), in any order."""
    return "(?s)" + "".join(f"(?=.*{part})" for part in parts)


# -- envs and policies --------------------------------------------------------------------------
class DataEnv(gym.Env[Any, Any]):
    """Box(4,) in [-10, 10] (or ``obs_space``), Discrete(2) (or ``action_space``), never checks its
    actions; at its step ``AT`` the ``field`` of the step's result becomes ``value``."""

    def __init__(self, field: str = "", value: Any = None, obs_space: gym.Space[Any] | None = None,
                 action_space: gym.Space[Any] | None = None) -> None:
        self.observation_space = obs_space or spaces.Box(-10, 10, (4,), np.float32)
        self.action_space = action_space or spaces.Discrete(2)
        self.field, self.value, self.count = field, value, 0

    def _obs(self) -> Any:
        space = self.observation_space
        assert isinstance(space, spaces.Box)
        return np.zeros(space.shape, space.dtype)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self.count += 1
        result = {"obs": self._obs(), "reward": 1.0, "terminated": False, "truncated": False}
        if self.count == AT and self.field:
            result[self.field] = self.value
        return result["obs"], result["reward"], result["terminated"], result["truncated"], {}


class OldResetEnv(DataEnv):
    """Old gym API: ``reset`` returns only the observation."""

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self._obs()


class OldStepEnv(DataEnv):
    """Old gym API: ``step`` returns ``(obs, reward, done, info)``."""

    def step(self, action: Any) -> Any:
        return self._obs(), 0.0, False, {}


class NoSpacesEnv(gym.Env[Any, Any]):
    """An env that never sets its spaces."""

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(4, np.float32), 0.0, False, False, {}


class NoneSpaceEnv(NoSpacesEnv):
    observation_space = None  # type: ignore[assignment]
    action_space = spaces.Discrete(2)


class ZerosModule(torch.nn.Module):
    """Action 0 for every env, with a weight that schemes can carry."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(4))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs @ self.weight > 0).long()


class LockedPolicy(torch.nn.Module):
    """A policy holding a lock: it cannot be deep-copied."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], dtype=torch.int64)


class Later:
    """A policy returning right actions, then from call ``AT + 1`` on, ``bad(obs)`` (call 1 is the
    dry step at construction, so batch step ``AT - 1`` is the first bad one)."""

    def __init__(self, bad: Callable[[torch.Tensor], Any], good: Callable[[torch.Tensor], Any] | None = None
                 ) -> None:
        self.bad, self.calls = bad, 0
        self.good = good or (lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64))

    def __call__(self, obs: torch.Tensor) -> Any:
        self.calls += 1
        return self.bad(obs) if self.calls > AT else self.good(obs)


def box_zeros(obs: torch.Tensor) -> torch.Tensor:
    return torch.zeros(obs.shape[0], 2)


def zeros_policy(obs: torch.Tensor) -> torch.Tensor:
    return torch.zeros(obs.shape[0], dtype=torch.int64)


class Linear4(torch.nn.Module):
    """A policy with one weight ``[4]`` (CartPole): pushes right when ``obs @ weight > 0``."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(4))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs @ self.weight > 0).long()


# -- builders -----------------------------------------------------------------------------------
class FormatOnly:
    """A layout that formats but does not say how actions are stored."""

    def format(self, batch: Any, shape: Any) -> Any:
        return batch, shape

    def reports_policy_version(self) -> bool:
        return True


def collector(**kwargs: Any) -> Callable[[], Any]:
    """``Collector(create_env_fn, frames_per_batch=8, **kwargs)`` (CartPole unless given)."""
    def build() -> Any:
        arguments = {"create_env_fn": CartPole, "frames_per_batch": 8, **kwargs}
        return Collector(**arguments)
    return build


def torchrl_collector(**kwargs: Any) -> Callable[[], Any]:
    """``rlcollect.torchrl.Collector``: TorchRL's own arguments as well."""
    def build() -> Any:
        from rlcollect.torchrl import Collector as TorchRLCollector

        return TorchRLCollector(**{"create_env_fn": CartPole, "frames_per_batch": 8, **kwargs})
    return build


def multi(cls: type = MultiSyncCollector, **kwargs: Any) -> Callable[[], Any]:
    """A one-worker multi-process collector, its worker from the forkserver, tiny batches."""
    def build() -> Any:
        arguments = {"create_env_fn": CartPole, "num_workers": 1, "frames_per_batch": 8,
                     "start_method": "forkserver", **kwargs}
        return cls(**arguments)
    return build


def batched(**kwargs: Any) -> Callable[[], Any]:
    """A one-env ``AsyncBatchedCollector`` serving a zeros policy, its worker from the forkserver, tiny
    batches."""
    def build() -> Any:
        arguments = {"create_env_fn": CartPole, "policy": zeros_policy, "num_envs": 1, "frames_per_batch": 8,
                     "start_method": "forkserver", **kwargs}
        return AsyncBatchedCollector(**arguments)
    return build


def replay(capacity: Any = 16, **kwargs: Any) -> Callable[[], Any]:
    return lambda: ReplayBuffer(capacity, **kwargs)


def replay_call(method: str, *args: Any) -> Callable[[], Any]:
    def build() -> Any:
        return getattr(ReplayBuffer(16, batch_size=4), method)(*args)
    return build


def update(*args: Any, make: Callable[[], Any] | None = None, **kwargs: Any) -> Callable[[], Any]:
    """``update_policy_weights_(*args, **kwargs)`` on a collector of :class:`Linear4` with a critic."""
    def build() -> Any:
        made = (make or collector(policy=Linear4(), models={"critic": torch.nn.Linear(4, 1)}))()
        try:
            return made.update_policy_weights_(*args, **kwargs)
        finally:
            made.shutdown()
    return build


def collect(env: Callable[[], Any], policy: Any = None, num_envs: int = 1) -> Callable[[], Any]:
    """Collect two batches of 8 steps per env: the data errors arise during iteration."""
    def build() -> Any:
        made = Collector(env, policy, num_envs=num_envs, frames_per_batch=8 * num_envs,
                         total_frames=16 * num_envs)
        with made:
            return list(made)
    return build


class CliFailed(Exception):
    """The CLI exited with a non-zero status; the message is ``exit <status>: <stderr>``."""


def cli(*argv: str) -> Callable[[], Any]:
    def build() -> Any:
        with tempfile.TemporaryDirectory() as folder:
            args = [a.replace("{out}", str(Path(folder) / "run")) for a in argv]
            err, out = io.StringIO(), io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                status = cli_main(args)
        if status:
            raise CliFailed(f"exit {status}: {err.getvalue().strip()}")
        return status
    return build


def make_vec_entry_point() -> Any:
    return gym.make_vec(CartPole, num_envs=2, vectorization_mode="vector_entry_point")


# -- the table ----------------------------------------------------------------------------------
T, V = TypeError, ValueError
SECTIONS: dict[str, str] = {}  # case id -> section


def section(name: str, *cases: Any) -> list[Any]:
    for case in cases:
        SECTIONS[case.id] = name
    return list(cases)


def case(case_id: str, build: Callable[[], Any], error: Any, pattern: str) -> Any:
    return pytest.param(build, error, pattern, id=case_id)


CASES: list[Any] = []
CASES += section(
    "Collector",
    # frames and counts
    case("frames_per_batch=0", collector(frames_per_batch=0),
         V, r"frames_per_batch must be a positive int, got 0"),
    case("frames_per_batch=-3", collector(frames_per_batch=-3), V, r"frames_per_batch .*got -3"),
    case("frames_per_batch='10'", collector(frames_per_batch="10"),
         T, r"frames_per_batch .*got '10' \(str\)"),
    case("frames_per_batch=2.5", collector(frames_per_batch=2.5),
         T, r"frames_per_batch .*got 2\.5 \(float\)"),
    case("frames_per_batch=True", collector(frames_per_batch=True), T, r"frames_per_batch .*got True"),
    case("frames_per_batch=None", collector(frames_per_batch=None), T, r"frames_per_batch .*got None"),
    case("frames_per_batch=np.float64(8)", collector(frames_per_batch=np.float64(8)),
         T, r"frames_per_batch .*8\.0"),
    case("frames_per_batch=10**12", collector(frames_per_batch=10**12), V,
         r"frames_per_batch=1000000000000 .*GiB"),
    case("frames_per_batch=10**9", collector(frames_per_batch=10**9),
         V, r"frames_per_batch: .*\(1000000000 frames\).*GiB"),
    case("frames_per_batch missing", lambda: Collector(CartPole), T, r"frames_per_batch"),
    case("total_frames=0", collector(total_frames=0),
         V, r"total_frames must be a positive int or -1 .*got 0"),
    case("total_frames=-2", collector(total_frames=-2), V, r"total_frames .*got -2"),
    case("total_frames='5'", collector(total_frames="5"), T, r"total_frames .*got '5'"),
    case("total_frames=2.5", collector(total_frames=2.5), T, r"total_frames .*got 2\.5"),
    case("total_frames=True", collector(total_frames=True), T, r"total_frames .*got True"),
    case("num_envs=0", collector(num_envs=0), V, r"num_envs must be a positive int, got 0"),
    case("num_envs=-1", collector(num_envs=-1), V, r"num_envs .*got -1"),
    case("num_envs='2'", collector(num_envs="2"), T, r"num_envs .*got '2'"),
    case("num_envs=1.5", collector(num_envs=1.5), T, r"num_envs .*got 1\.5"),
    case("num_envs=10**9", collector(num_envs=10**9), V, r"num_envs .*up to \d+, got 1000000000"),
    case("num_envs=None", collector(num_envs=None), T, r"num_envs .*got None"),
    case("init_random_frames=-2", collector(init_random_frames=-2), V, r"init_random_frames .*got -2"),
    case("init_random_frames='3'", collector(init_random_frames="3"), T, r"init_random_frames .*got '3'"),
    case("init_random_frames=1.5", collector(init_random_frames=1.5), T, r"init_random_frames .*got 1\.5"),
    case("max_frames_per_traj='10'", collector(max_frames_per_traj="10"),
         T, r"max_frames_per_traj .*got '10'"),
    case("max_frames_per_traj=2.5", collector(max_frames_per_traj=2.5), T, r"max_frames_per_traj .*got 2\.5"),
    case("max_frames_per_traj=True", collector(max_frames_per_traj=True),
         T, r"max_frames_per_traj .*got True"),
    # seeds
    case("seed='abc'", collector(seed="abc"), T, r"seed must be None or an int in \[0, 2\*\*63\), got 'abc'"),
    case("seed=2**64", collector(seed=2**64), V, r"seed .*got 18446744073709551616"),
    case("seed=2**63", collector(seed=2**63), V, r"seed .*got 9223372036854775808"),
    case("seed=-1", collector(seed=-1), V, r"seed .*got -1"),
    case("seed=1.5", collector(seed=1.5), T, r"seed .*got 1\.5 \(float\)"),
    case("seed=True", collector(seed=True), T, r"seed .*got True"),
    case("seed=np.float32(1)", collector(seed=np.float32(1)), T, r"seed .*got np\.float32\(1\.0\)"),
    case("set_seed('x')", lambda: collector()().set_seed("x"), T, r"seed .*got 'x'"),
    case("set_seed(2**64)", lambda: collector()().set_seed(2**64), V, r"seed .*got 18446744073709551616"),
    # envs
    case("create_env_fn=3", collector(create_env_fn=3), T, r"create_env_fn must be an env id.*got int 3"),
    case("create_env_fn=None", collector(create_env_fn=None), T, r"create_env_fn .*got NoneType None"),
    case("create_env_fn=3.5", collector(create_env_fn=3.5), T, r"create_env_fn .*got float 3\.5"),
    case("create_env_fn=[1]", collector(create_env_fn=[1]), T, r"create_env_fn\[0\] .*got int 1"),
    case("create_env_fn='NoSuchEnv-v0'", collector(create_env_fn="NoSuchEnv-v0"), V,
         r"create_env_fn='NoSuchEnv-v0' is not a registered Gymnasium env id"),
    case("create_env_fn=env instance, num_envs=2", collector(create_env_fn=DataEnv(), num_envs=2), V,
         r"num_envs=2 with create_env_fn=<.*DataEnv.*>, one env: pass its id or a function that builds it"),
    case("create_env_fn=env instance, create_env_kwargs", collector(create_env_fn=DataEnv(),
                                                                    create_env_kwargs={"x": 1}), T,
         r"create_env_kwargs=\{'x': 1\} with create_env_fn=<.*DataEnv.*>, an env already built"),
    case("create_env_fn returns int", collector(create_env_fn=lambda: 3), T,
         r"create_env_fn returned int 3; expected a gymnasium\.Env"),
    case("create_env_fn returns None", collector(create_env_fn=lambda: None),
         T, r"create_env_fn returned NoneType"),
    case("env reset returns obs only", collector(create_env_fn=lambda: OldResetEnv()), V,
         names(r"env <.*OldResetEnv", r"returned ndarray from reset\(\)", "Gymnasium API", "shimmy")),
    case("env step returns 4 values", collect(OldStepEnv), V,
         names(r"env <.*OldStepEnv", r"returned a tuple of 4 values \(.*\) from step\(\)",
               r"\(obs, reward, terminated, truncated, info\)", "shimmy")),
    case("env without spaces", collector(create_env_fn=lambda: NoSpacesEnv()), T,
         names(r"env <.*NoSpacesEnv", r"observation_space=None", r"gymnasium\.spaces\.Space")),
    case("env with observation_space=None", collector(create_env_fn=lambda: NoneSpaceEnv()), T,
         names(r"env <.*NoneSpaceEnv", r"observation_space=None")),
    case("create_env_kwargs=[1]", collector(create_env_kwargs=[1]),
         T, r"create_env_kwargs must be a dict.*int"),
    case("create_env_kwargs='x'", collector(create_env_kwargs="x"),
         T, r"create_env_kwargs must be a dict.*str"),
    case("create_env_kwargs bogus for id", collector(create_env_kwargs={"bogus": 1}), T,
         r"create_env_kwargs=\{'bogus': 1\} do not fit create_env_fn='CartPole-v1'"),
    case("create_env_kwargs bogus for factory",
         collector(create_env_fn=lambda: DataEnv(), create_env_kwargs={"bogus": 1}), T,
         r"create_env_kwargs=\{'bogus': 1\} do not fit create_env_fn=<function"),
    # policy
    case("policy=5", collector(policy=5), T, r"policy must be None, an nn\.Module.*got int 5"),
    case("policy='policy'", collector(policy="policy"), T, r"policy must be .*got str 'policy'"),
    case("policy_factory=3", collector(policy_factory=3),
         T, r"policy_factory must be callable or None, got int 3"),
    case("policy and policy_factory", collector(policy=zeros_policy, policy_factory=lambda: zeros_policy), T,
         r"Collector runs one policy, in this process: give policy or policy_factory, not both"),
    case("policy output of wrong shape", collector(policy=lambda obs: torch.zeros(obs.shape[0], 1)), V,
         r"got shape \(1, 1\) dtype torch\.float32, expected shape \(1,\)"),
    case("policy returning a list", collector(policy=lambda obs: [0]), V, r"the policy returned list"),
    # devices
    case("device='cpux'", collector(device="cpux"), V, r"device='cpux' is not a torch device"),
    case("device=1.5", collector(device=1.5), T, r"device must be None, a torch\.device.*got 1\.5 \(float\)"),
    case("env_device='meta'", collector(env_device="meta"),
         V, r"env_device='meta': Gymnasium envs run on the CPU"),
    case("policy_device='cpux'", collector(policy_device="cpux"),
         V, r"policy_device='cpux' is not a torch device"),
    case("storing_device=[1]", collector(storing_device=[1]),
         V, r"storing_device\[0\]=1 is not a torch device"),
    case("storing_device=['cpu', 'meta']", collector(storing_device=["cpu", "meta"]),
         V, r"storing_device=\['cpu', 'meta'\] lists different devices per worker"),
    case("device=[]", collector(device=[]), V, r"device=\[\] lists different devices per worker"),
    case("storing_device='gpu'", collector(storing_device="gpu"),
         V, r"storing_device='gpu' is not a torch device"),
    # exploration, flags, hooks
    case("exploration_type='foo'", collector(exploration_type="foo"),
         V, r"exploration_type='foo' is not one of"),
    case("exploration_type=5", collector(exploration_type=5), T, r"exploration_type must be .*got 5 \(int\)"),
    case("exploration_type=None", collector(exploration_type=None), T, r"exploration_type .*got None"),
    case("split_trajs='yes'", collector(split_trajs="yes"),
         T, r"split_trajs must be True or False, got 'yes'"),
    case("split_trajs=None", collector(split_trajs=None), T, r"split_trajs .*got None"),
    case("reset_at_each_iter='x'", collector(reset_at_each_iter="x"), T, r"reset_at_each_iter .*got 'x'"),
    case("set_truncated=2", collector(set_truncated=2), T, r"set_truncated .*got 2 \(int\)"),
    case("return_same_td='x'", collector(return_same_td="x"), T, r"return_same_td .*got 'x'"),
    case("compile_policy='x'", collector(compile_policy="x"), T, r"compile_policy must be .*got 'x' \(str\)"),
    case("compile_policy=1", collector(compile_policy=1), T, r"compile_policy .*got 1 \(int\)"),
    case("postproc=1", collector(postproc=1), T, r"postproc must be callable or None, got int 1"),
    case("pre_collect_hook='x'", collector(pre_collect_hook="x"),
         T, r"pre_collect_hook must be callable.*'x'"),
    case("post_collect_hook=3", collector(post_collect_hook=3), T, r"post_collect_hook must be callable.*3"),
    case("check='some'", collector(check="some"), V, r"check='some' is not one of"),
    case("layout='tf'", collector(layout="tf"), V, r"layout='tf' is not 'rlcollect' or a layout object"),
    case("layout=None", collector(layout=None), V, r"layout=None is not 'rlcollect' or a layout object"),
    case("layout object without action_dtype", collector(layout=FormatOnly()), V,
         r"is not 'rlcollect' or a layout object .*format, reports_policy_version, action_dtype"),
    case("layout='torchrl' in the core", collector(layout="torchrl"), V,
         r"layout='torchrl' is not 'rlcollect' or a layout object .*rlcollect.torchrl's collectors deliver "
         r"TorchRL's layout"),
    case("track_policy_version='yes'", torchrl_collector(track_policy_version="yes"),
         T, r"track_policy_version must be True or False, got 'yes'"),
    case("cat_results='cat'", torchrl_collector(cat_results="cat"),
         V, r"cat_results='cat' is not one of \(None, 'stack', 0, -1\)"),
    case("cat_results=1", torchrl_collector(cat_results=1), V, r"cat_results=1 is not one of"),
    case("cat_results=True", torchrl_collector(cat_results=True), V, r"cat_results=True is not one of"),
    case("cat_results='stack' in rlcollect's layout",
         torchrl_collector(layout="rlcollect", cat_results="stack"),
         V, r"cat_results='stack' groups the workers' batches in TorchRL's layout: pass layout='torchrl'"),
    case("extend_buffer='no'", torchrl_collector(extend_buffer="no"),
         T, r"extend_buffer must be True or False, got 'no'"),
    case("use_buffers=1", torchrl_collector(use_buffers=1), T, r"use_buffers must be True or False, got 1"),
    case("reset_when_done=False", torchrl_collector(reset_when_done=False),
         V, r"reset_when_done=False is not supported"),
    case("compact_obs='x'", torchrl_collector(compact_obs="x"),
         T, r"compact_obs must be True or False, got 'x'"),
    case("trust_policy=2", torchrl_collector(trust_policy=2),
         T, r"trust_policy must be True or False, got 2"),
    case("cudagraph_policy='x'", torchrl_collector(cudagraph_policy="x"),
         T, r"cudagraph_policy must be True, False or a dict of CudaGraphModule arguments, got 'x' \(str\)"),
    case("auto_register_policy_transforms='yes'", torchrl_collector(auto_register_policy_transforms="yes"),
         T, r"auto_register_policy_transforms must be True or False, got 'yes'"),
    # models, weights, replay buffer, trajectories
    case("models=1", collector(models=1), T, r"models must be a dict \{model_id: module\}, got int 1"),
    case("models={'a': 1}", collector(models={"a": 1}), T, r"models\['a'\] must be an nn\.Module, got int 1"),
    case("models={1: module}", collector(models={1: torch.nn.Linear(1, 1)}), T, r"models keys .*got 1"),
    case("weight_sync_schemes=1", collector(weight_sync_schemes=1),
         T, r"weight_sync_schemes must be a dict.*int 1"),
    case("weight_sync_schemes={'policy': 1}", collector(weight_sync_schemes={"policy": 1}), T,
         r"weight_sync_schemes\['policy'\] must be a WeightSyncScheme, got int 1"),
    case("weight_sync_schemes unknown model",
         collector(weight_sync_schemes={"critic": SharedMemWeightSyncScheme()}), V,
         r"weight_sync_schemes names model\(s\) \['critic'\]"),
    case("weight_updater=1", collector(weight_updater=1), T, r"weight_updater must be .*got int 1"),
    case("weight_updater='x'", collector(weight_updater="x"), T, r"weight_updater must be .*got str 'x'"),
    case("replay_buffer=3", collector(replay_buffer=3), T, r"replay_buffer must have an extend.*got int 3"),
    case("replay_buffer='rb'", collector(replay_buffer="rb"),
         T, r"replay_buffer must have an extend.*str 'rb'"),
    case("replay_buffer={}", collector(replay_buffer={}), T, r"replay_buffer must have an extend.*dict \{\}"),
    case("trajs_per_batch=0", collector(trajs_per_batch=0),
         V, r"trajs_per_batch must be a positive int .*got 0"),
    case("trajs_per_batch=1.5", collector(trajs_per_batch=1.5), T, r"trajs_per_batch .*got 1\.5"),
    case("trajs_per_batch='2'", collector(trajs_per_batch="2"), T, r"trajs_per_batch .*got '2'"),
    case("trajs_per_batch with set_truncated", collector(trajs_per_batch=2, set_truncated=True), V,
         r"trajs_per_batch yields complete episodes, set_truncated=True cuts them"),
    case("trajs_per_batch with reset_at_each_iter", collector(trajs_per_batch=2, reset_at_each_iter=True), V,
         r"trajs_per_batch yields complete episodes, reset_at_each_iter=True cuts them"),
    case("traj_format='x'", collector(trajs_per_batch=1, traj_format="x"),
         V, r"traj_format must be .*got 'x'"),
    case("traj_format=5", collector(trajs_per_batch=1, traj_format=5), T, r"traj_format must be .*got 5"),
    case("traj_format without trajs_per_batch", collector(traj_format="cat"), V,
         r"traj_format='cat' needs trajs_per_batch"),
    case("split_trajs with trajs_per_batch", collector(split_trajs=True, trajs_per_batch=1), V,
         r"split_trajs and trajs_per_batch exclude each other"),
    case("unknown keyword", collector(foo=1), T, r"unexpected keyword argument 'foo'"),
    case("timeout on Collector", collector(timeout=None), T, r"unexpected keyword argument 'timeout'"),
    case("vector env with num_envs=3",
         lambda: Collector(gym.vector.SyncVectorEnv([lambda: gym.make(CartPole)] * 2), frames_per_batch=8,
                           num_envs=3), V,
         r"num_envs=3 with a VectorEnv of 2 envs"),
)
CASES += section(
    "MultiSync/MultiAsync",
    case("multi num_workers=0", multi(num_workers=0), V, r"num_workers must be a positive int, got 0"),
    case("multi num_workers='2'", multi(num_workers="2"), T, r"num_workers .*got '2'"),
    case("multi num_workers=10**6", multi(num_workers=10**6), V, r"num_workers .*up to \d+, got 1000000"),
    case("multi num_workers=None", multi(num_workers=None), V, r"num_workers is required"),
    case("multi num_envs_per_worker=0", multi(num_envs_per_worker=0), V, r"num_envs_per_worker .*got 0"),
    case("multi num_envs_per_worker=1.5", multi(num_envs_per_worker=1.5),
         T, r"num_envs_per_worker .*got 1\.5"),
    case("multi frames_per_batch=np.float64(8)", multi(frames_per_batch=np.float64(8)),
         T, r"frames_per_batch .*8\.0"),
    case("multi frames_per_batch=[8, 16]", multi(num_workers=2, frames_per_batch=[8, 16]), V,
         r"frames_per_batch=\[8, 16\] must be a positive int, or a list of 2 equal positive ints"),
    case("multi frames_per_batch=[8]", multi(num_workers=2, frames_per_batch=[8]), V,
         r"exactly one value per worker: got frames_per_batch=\[8\] for 2 workers"),
    case("multi frames_per_batch=[8, 0]", multi(num_workers=2, frames_per_batch=[8, 0]), V,
         r"frames_per_batch\[1\] must be a positive int, or a list .*got 0"),
    case("async frames_per_batch=[8, 8, 8]", multi(cls=MultiAsyncCollector, frames_per_batch=[8, 8, 8]), V,
         r"exactly one value per worker: got frames_per_batch=\[8, 8, 8\] for 1 workers"),
    case("batched policy and policy_factory", batched(policy_factory=lambda: zeros_policy), T,
         r"AsyncBatchedCollector serves one policy, in this process: give policy or policy_factory, "
         r"not both"),
    case("multi timeout=None", multi(timeout=None),
         T, r"timeout must be a positive number of seconds, got None"),
    case("multi timeout='5'", multi(timeout="5"), T, r"timeout .*got '5'"),
    case("multi timeout=0", multi(timeout=0), V, r"timeout .*got 0"),
    case("multi timeout=-1", multi(timeout=-1), V, r"timeout .*got -1"),
    case("multi timeout=inf", multi(timeout=float("inf")), V, r"timeout .*got inf"),
    case("multi start_timeout='x'", multi(start_timeout="x"), T, r"start_timeout .*got 'x'"),
    case("multi start_method='thread'", multi(start_method="thread"),
         V, r"start_method='thread' is not one of"),
    case("multi start_method=5", multi(start_method=5), T, r"start_method must be one of .*got 5"),
    case("multi max_worker_restarts=-1", multi(max_worker_restarts=-1), V, r"max_worker_restarts .*got -1"),
    case("multi max_worker_restarts=1.5", multi(max_worker_restarts=1.5),
         T, r"max_worker_restarts .*got 1\.5"),
    case("multi preemptive_threshold=-0.5", multi(preemptive_threshold=-0.5), V,
         r"preemptive_threshold .*\[0, 1\] .*got -0\.5"),
    case("multi preemptive_threshold=1.5", multi(preemptive_threshold=1.5),
         V, r"preemptive_threshold .*got 1\.5"),
    case("multi preemptive_threshold='half'", multi(preemptive_threshold="half"), T,
         r"preemptive_threshold .*got 'half'"),
    case("multi prefetch='yes'", multi(prefetch="yes"), T, r"prefetch must be True or False, got 'yes'"),
    case("multi update_at_each_batch=1", multi(update_at_each_batch=1), T, r"update_at_each_batch .*got 1"),
    case("multi seed='abc'", multi(seed="abc"), T, r"seed .*got 'abc'"),
    case("multi create_env_fn list too long", multi(create_env_fn=[CartPole, CartPole]), V,
         r"create_env_fn has 2 entries for num_workers=1"),
    case("multi create_env_fn=[3]", multi(create_env_fn=[3]),
         T, r"create_env_fn\[0\] must be an env id.*got int 3"),
    case("multi create_env_kwargs list too long", multi(create_env_kwargs=[{}, {}]), V,
         r"create_env_kwargs has 2 entries for num_workers=1"),
    case("multi collector_class=int", multi(collector_class=int), T, r"collector_class must be .*int"),
    case("multi collector_kwargs without class", multi(collector_kwargs={"num_workers": 2}), V,
         r"collector_kwargs=\{'num_workers': 2\} needs collector_class"),
    case("multi unknown keyword", multi(num_env=2), T, r"unexpected keyword argument 'num_env'"),
    case("multi policy=5", multi(policy=5), T, r"policy must be .*got int 5"),
    case("multi replay_buffer=3", multi(replay_buffer=3), T, r"replay_buffer must have an extend.*int 3"),
    case("async preemptive_threshold", multi(MultiAsyncCollector, preemptive_threshold=0.5), V,
         r"preemptive_threshold applies to synchronous collection only"),
    case("async prefetch", multi(MultiAsyncCollector, prefetch=True),
         V, r"prefetch=True applies to synchronous"),
    case("async seed=2**64", multi(MultiAsyncCollector, seed=2**64), V, r"seed .*got 18446744073709551616"),
)
CASES += section(
    "AsyncBatched",
    case("batched policy=None", batched(policy=None), T, r"AsyncBatchedCollector serves a policy"),
    case("batched num_envs=0", batched(num_envs=0), V, r"num_envs must be a positive int, got 0"),
    case("batched num_envs='2'", batched(num_envs="2"), T, r"num_envs .*got '2'"),
    case("batched envs_per_worker=0", batched(envs_per_worker=0), V, r"envs_per_worker .*got 0"),
    case("batched num_envs not a multiple", batched(num_envs=3, envs_per_worker=2), V,
         r"num_envs=3 is not a multiple of envs_per_worker=2"),
    case("batched max_batch_size=0", batched(max_batch_size=0), V, r"max_batch_size .*got 0"),
    case("batched min_batch_size=5", batched(min_batch_size=5),
         V, r"min_batch_size=5 is more than the 1 envs"),
    case("batched server_timeout='x'", batched(server_timeout="x"), T, r"server_timeout .*got 'x'"),
    case("batched server_timeout=-1", batched(server_timeout=-1), V, r"server_timeout .*got -1"),
    case("batched weight_sync=5", batched(weight_sync=5), T, r"weight_sync_schemes\['policy'\] .*got int 5"),
    case("batched weight_sync and schemes", batched(weight_sync=SharedMemWeightSyncScheme(),
                                                    weight_sync_schemes={}), V,
         r"give weight_sync or weight_sync_schemes, not both"),
    case("batched yield_completed_trajectories and trajs_per_batch",
         batched(yield_completed_trajectories=True, trajs_per_batch=2), V,
         r"give yield_completed_trajectories or trajs_per_batch"),
    case("batched device='cpux'", batched(device="cpux"), V, r"device='cpux' is not a torch device"),
    case("batched timeout=None", batched(timeout=None), T, r"timeout .*got None"),
    case("batched frames_per_batch=10**12", batched(frames_per_batch=10**12), V, r"frames_per_batch=10{12}"),
    case("batched min_batch_size > max_batch_size", batched(num_envs=4, min_batch_size=3, max_batch_size=2),
         V, r"min_batch_size=3 is more than max_batch_size=2"),
    case("batched server_timeout=nan", batched(server_timeout=float("nan")), V, r"server_timeout .*got nan"),
    case("batched server_timeout=inf", batched(server_timeout=float("inf")), V, r"server_timeout .*got inf"),
    case("batched policy holding a lock", batched(policy=LockedPolicy()), T,
         names(r"copy\.deepcopy\(policy\) failed for LockedPolicy", r"_thread\.lock", r"policy_factory")),
)


def receiver_on(kind: str) -> Callable[[], Any]:
    """``register_scheme_receiver`` given a bare scheme, a string, or one receiver for two collectors."""
    def build() -> Any:
        collector = Collector(CartPole, ZerosModule(), frames_per_batch=8)
        if kind == "bare":
            collector.register_scheme_receiver(SharedMemWeightSyncScheme())  # type: ignore[arg-type]
        elif kind == "string":
            collector.register_scheme_receiver({"policy": "shared"})  # type: ignore[dict-item]
        else:
            sender = SharedMemWeightSyncScheme()
            sender.init_on_sender(model_id="policy", model=ZerosModule(), num_workers=2)
            receiver = sender.receiver(0)
            other = Collector(CartPole, ZerosModule(), frames_per_batch=8)
            collector.register_scheme_receiver({"policy": receiver})
            other.register_scheme_receiver({"policy": receiver})
        return collector
    return build


def sender_receiver(worker_idx: Any) -> Callable[[], Any]:
    def build() -> Any:
        sender = SharedMemWeightSyncScheme()
        sender.init_on_sender(model_id="policy", model=torch.nn.Linear(4, 2), num_workers=2)
        return sender.receiver(worker_idx)
    return build


CASES += section(
    "weight-sync schemes",
    case("register_scheme_receiver(scheme) without a dict", receiver_on("bare"), T,
         r"register_scheme_receiver takes a dict \{model_id: WeightSyncScheme\}.*got SharedMemWeightSync"),
    case("register_scheme_receiver({'policy': 'shared'})", receiver_on("string"), T,
         r"weight_recv_schemes\['policy'\] must be a WeightSyncScheme \(or a scheme with the reference's "
         r"init_on_receiver, connect and receive, such as TorchRL's\), got str 'shared'"),
    case("one receiver scheme on two collectors", receiver_on("twice"), RuntimeError,
         r"already feeds model 'policy' of another collector"),
    case("sender.receiver(5) of 2 workers", sender_receiver(5), V,
         r"receiver\(worker_idx=5\): this sender serves num_workers=2 .*\[0, 2\)"),
    case("sender.receiver(-1)", sender_receiver(-1), V, r"receiver\(worker_idx=-1\)"),
)
# the replay rewrite decides TypeError or ValueError for a value of the wrong type: either is fair here
TV = (TypeError, ValueError)
CASES += section(
    "ReplayBuffer",
    case("replay capacity=0", replay(0), V, r"capacity must be a positive int, got capacity=0"),
    case("replay capacity=-1", replay(-1), V, r"capacity .*-1"),
    case("replay capacity='10'", replay("10"), TV, r"capacity .*'10'"),
    case("replay capacity=1.5", replay(1.5), TV, r"capacity .*1\.5"),
    case("replay storage='disk'", replay(storage="disk"), V, r"storage must be one of .*'disk'"),
    case("replay memmap without path", replay(storage="memmap"), V, r"storage='memmap' needs a folder"),
    case("replay path with memory", replay(path="/tmp/x"), V, r"path is only used with storage='memmap'"),
    case("replay sampler='x'", replay(sampler="x"), V, r"sampler must be one of .*'x'"),
    case("replay batch_size=0", replay(batch_size=0), V, r"batch_size .*0"),
    case("replay batch_size='4'", replay(batch_size="4"), TV, r"batch_size .*'4'"),
    case("replay alpha=-1", replay(sampler="prioritized", alpha=-1), V, r"alpha .*-1"),
    case("replay beta='x'", replay(sampler="prioritized", beta="x"), TV, r"beta .*'x'"),
    case("replay slice without slice_len", replay(sampler="slice"), V, r"sampler='slice' needs slice_len"),
    case("replay slice_len > capacity", replay(sampler="slice", slice_len=32), V, r"slice_len .*32"),
    case("replay batch_size not a multiple of slice_len",
         replay(sampler="slice", slice_len=4, batch_size=6), V,
         r"batch_size must be a multiple of slice_len=4, got batch_size=6"),
    case("replay slice_len without slice", replay(slice_len=4),
         V, r"slice_len is only used with sampler='slice'"),
    case("replay seed='abc'", replay(seed="abc"), TV, r"seed .*'abc'"),
    case("replay extend(dict)", replay_call("extend", {"x": torch.zeros(3)}), T, r"TensorDict.*dict"),
    case("replay extend(batch_size=[])", replay_call("extend", TensorDict({"x": torch.zeros(3)}, [])), V,
         r"batch_size=\[\]"),
)
CASES += section(
    "update_policy_weights_",
    case("weights=5", update(5),
         T, r"policy_or_weights must be an nn\.Module, a TensorDict or a dict.*int 5"),
    case("weights='abc'", update("abc"), T, r"policy_or_weights must be .*str 'abc'"),
    case("weights=[tensor]", update([torch.zeros(4)]), T, r"policy_or_weights must be .*list"),
    case("weights= keyword int", update(weights=5), T, r"weights must be .*int 5"),
    case("policy= keyword int", update(policy=5), T, r"policy must be an nn\.Module.*int 5"),
    case("state dict with a wrong key", update({"bogus": torch.zeros(4)}), V,
         r"weights for 'policy' hold \['bogus'\] which the module does not have \(it has \['weight'\]\)"),
    case("state dict with a wrong shape", update({"weight": torch.zeros(5)}), V,
         r"weights for 'policy': 'weight' has shape \(5,\), the module's has \(4,\)"),
    case("state dict with a str value", update({"weight": "x"}),
         T, r"policy_or_weights\['weight'\] must be a tensor"),
    case("state dict with a list value", update({"weight": [0.0] * 4}),
         T, r"policy_or_weights\['weight'\] .*list"),
    case("state dict with an int key", update({1: torch.zeros(4)}), T, r"policy_or_weights has the key 1"),
    case("TensorDict of a wrong shape", update(TensorDict({"weight": torch.zeros(3)})), V,
         r"'weight' has shape \(3,\), the module's has \(4,\)"),
    case("module of another shape", update(torch.nn.Linear(3, 3)),
         V, r"weights for 'policy' hold \['bias'\]"),
    case("unknown model_id", update(Linear4(), model_id="nope"), V, r"unknown model id 'nope'"),
    case("model_id=3", update(Linear4(), model_id=3),
         T, r"model_id must be a model id \(str\) or None, got 3"),
    case("weights_dict=[1]", update(weights_dict=[1]), T, r"weights_dict must be a dict .*list \[1\]"),
    case("weights_dict unknown id", update(weights_dict={"x": Linear4()}), V, r"unknown model id.*'x'"),
    case("weights_dict value 5", update(weights_dict={"critic": 5}),
         T, r"weights_dict\['critic'\] must be .*int 5"),
    case("weights_dict key 1", update(weights_dict={1: Linear4()}), T, r"weights_dict keys .*got 1"),
    case("weights_dict critic of a wrong shape",
         update(weights_dict={"critic": {"weight": torch.zeros(2, 4)}}), V,
         r"weights for 'critic': 'weight' has shape \(2, 4\), the module's has \(1, 4\)"),
    case("weights_dict with model_id", update(weights_dict={"policy": Linear4()}, model_id="policy"), V,
         r"weights_dict updates several models at once"),
    case("weights twice", update(Linear4(), weights={"weight": torch.zeros(4)}), V,
         r"give the weights once: got policy_or_weights and weights"),
    case("worker_ids=1", update(worker_ids=1),
         V, r"worker_ids=1: worker 1 is out of range for num_workers=1"),
    case("worker_ids=-1", update(worker_ids=-1), V, r"worker_ids=-1: worker -1 is out of range"),
    case("worker_ids=[0, 5]", update(worker_ids=[0, 5]), V, r"worker_ids=\[0, 5\]: worker 5 is out of range"),
    case("worker_ids='abc'", update(worker_ids="abc"),
         V, r"worker_ids='abc': 'abc' is neither a worker index"),
    case("worker_ids=0.0", update(worker_ids=0.0),
         T, r"worker_ids must be ints or devices, got 0\.0 \(float\)"),
    case("worker_ids=True", update(worker_ids=True), T, r"worker_ids must be ints or devices, got True"),
    case("worker_ids={0}", update(worker_ids={0}), T, r"worker_ids must be ints or devices, got \{0\}"),
    case("worker_ids=np.array([3])", update(worker_ids=np.array([3])),
         V, r"worker_ids=\[3\]: worker 3 is out"),
    case("worker_ids=meta", update(worker_ids=torch.device("meta")), V, r"policy runs on cpu, not meta"),
    case("multi weights=5", update(5, make=multi(policy=Linear4())), T, r"policy_or_weights must be .*int 5"),
    case("multi worker_ids=[3]", update(worker_ids=[3], make=multi(policy=Linear4())), V,
         r"worker_ids=\[3\]: worker 3 is out of range for num_workers=1"),
    case("batched worker_ids=[5]", update(worker_ids=[5], make=batched(policy=Linear4())), V,
         r"worker_ids=\[5\]: worker 5 is out of range for num_workers="),
    case("batched unknown model_id", update(Linear4(), model_id="nope", make=batched(policy=Linear4())), V,
         r"unknown model id\(s\) \['nope'\]"),
)
CASES += section(
    "CLI",
    case("cli --frames 0", cli("collect", "--frames", "0", "--out", "{out}"), CliFailed,
         r"exit 2: rlcollect: error: .*--frames.*'0'"),
    case("cli --frames abc", cli("collect", "--frames", "abc", "--out", "{out}"), CliFailed,
         r"exit 2: .*--frames.*'abc'"),
    case("cli --num-envs -1", cli("collect", "--num-envs", "-1", "--out", "{out}"), CliFailed,
         r"exit 2: .*--num-envs.*'-1'"),
    case("cli --seed abc", cli("collect", "--seed", "abc", "--out", "{out}"),
         CliFailed, r"exit 2: .*--seed.*'abc'"),
    case("cli --seed 2**64", cli("collect", "--seed", str(2**64), "--frames", "8", "--out", "{out}"),
         CliFailed,
         r"exit 2: .*seed.*18446744073709551616"),
    case("cli --env NoSuchEnv-v0", cli("collect", "--env", "NoSuchEnv-v0", "--frames", "8", "--out", "{out}"),
         CliFailed, r"exit 2: .*NoSuchEnv-v0"),
    case("cli --policy nomodule:f", cli("collect", "--policy", "no_such_module_xyz:f", "--frames", "8",
                                        "--out", "{out}"), CliFailed, r"exit 2: .*no_such_module_xyz"),
    case("cli --frames-per-batch 0", cli("collect", "--frames-per-batch", "0", "--out", "{out}"), CliFailed,
         r"exit 2: .*--frames-per-batch.*'0'"),
    case("cli missing --out", cli("collect"), CliFailed, r"exit 2: .*--out"),
    case("cli unknown flag", cli("collect", "--bogus", "--out", "{out}"), CliFailed, r"exit 2: .*--bogus"),
    case("cli unknown command", cli("bogus"), CliFailed, r"exit 2: .*'bogus'"),
)


def env_case(case_id: str, field: str, value: Any, *parts: str, obs_space: Any = None) -> Any:
    return case(case_id, collect(lambda: DataEnv(field, value, obs_space=obs_space)), V,
                names(r"env 0\b", rf"step {STEP}\b", *parts))


def policy_case(case_id: str, bad: Callable[[torch.Tensor], Any], *parts: str, box: bool = False) -> Any:
    action_space = spaces.Box(-1, 1, (2,), np.float32) if box else None

    def env() -> Any:
        return DataEnv(action_space=action_space)

    def build() -> Any:
        return collect(env, Later(bad, box_zeros if box else None), num_envs=2)()
    return case(case_id, build, V, names(rf"step {STEP}\b", *parts))


CASES += section(
    "env/policy data",
    env_case("obs of shape (1,) for Box(4,)", "obs", np.zeros(1, np.float32), r"\(1,\)", r"\(4,\)"),
    env_case("obs scalar for Box(4,)", "obs", np.float32(1.0), r"shape \(\)", r"\(4,\)"),
    env_case("obs None", "obs", None, r"None"),
    env_case("obs float 1.7 for a uint8 Box", "obs", np.full(4, 1.7), r"1\.7", r"uint8",
             obs_space=spaces.Box(0, 255, (4,), np.uint8)),
    env_case("reward '1.0'", "reward", "1.0", r"reward", r"'1\.0'"),
    env_case("reward None", "reward", None, r"reward", r"None"),
    env_case("terminated 'no'", "terminated", "no", r"terminated", r"'no'"),
    env_case("truncated 'no'", "truncated", "no", r"truncated", r"'no'"),
    env_case("obs out of Box bounds", "obs", np.full(4, 11.0, np.float32), r"11\.0", r"outside|bounds"),
    env_case("obs NaN", "obs", np.full(4, np.nan, np.float32), r"nan"),
    policy_case("action later of shape [1]", lambda obs: torch.zeros(1, dtype=torch.int64), r"\[1\]",
         r"\[2\]"),
    policy_case("action later 1.7 for Discrete(2)", lambda obs: torch.full((obs.shape[0],), 1.7), r"float"),
    policy_case("action 7 for Discrete(2)", lambda obs: torch.full((obs.shape[0],), 7), r"env 0\b", r"\b7\b",
                r"Discrete\(2\)"),
    policy_case("action -3 for Discrete(2)", lambda obs: torch.full((obs.shape[0],), -3), r"env 0\b", r"-3",
                r"Discrete\(2\)"),
    policy_case("action of shape [N, 3] for Box(2,)", lambda obs: torch.zeros(obs.shape[0], 3),
                r"[\[(]2, 3[\])]", r"[\[(]2, 2[\])]|[\[(]2,[\])]", box=True),
    policy_case("action NaN for Box(2,)", lambda obs: torch.full((obs.shape[0], 2), float("nan")), r"env 0\b",
                r"nan", box=True),
    case("policy output on the meta device", collector(
        policy=lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64, device="meta")), V,
         r"the policy's action is on the meta device"),
    case("make_vec vector_entry_point with a collector-side episode limit",
         lambda: Collector(make_vec_entry_point(), frames_per_batch=8, max_frames_per_traj=5), V,
         names(r"max_frames_per_traj=5", r"NEXT_STEP", r"max_episode_steps=5")),
)

for _section, _id, _build, _error, _pattern in TRUST_ENTRIES:  # trust, resources and misuse
    CASES += section(_section, case(_id, _build, _error, _pattern))

OUTCOMES: dict[str, str] = {}


def _shutdown(made: Any) -> None:
    for item in made if isinstance(made, list) else [made]:
        with contextlib.suppress(Exception):
            item.shutdown()


@pytest.mark.parametrize("build,error,pattern", CASES)
def test_bad_input_is_refused_with_a_clear_message(
    request: pytest.FixtureRequest, build: Callable[[], Any], error: Any, pattern: str
) -> None:
    case_id = request.node.callspec.id
    OUTCOMES[case_id] = "failed"
    assert_refused(case_id, build, error, pattern)
    OUTCOMES[case_id] = "passed"


def assert_refused(case_id: str, build: Callable[[], Any], error: Any, pattern: str) -> None:
    """``build()`` raises ``error`` with a message matching ``pattern`` (what it made, if it raised
    nothing, is shut down)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            made = build()
        except error as raised:
            message = str(raised)
        else:
            _shutdown(made)
            pytest.fail(f"accepted: {case_id} raised nothing")
    assert re.search(pattern, message), f"message {message!r} does not match {pattern!r}"


def test_the_table_has_at_least_150_cases() -> None:
    counts = collections.Counter(SECTIONS.values())
    # ids are unique (one section entry each); 263 cases, and 150 of trust, resources and misuse
    assert len(CASES) == len(SECTIONS) >= 413, counts
    assert all(count >= 5 for count in counts.values()), counts


def test_summary(tmp_path: Path) -> None:
    """Cases per section and, for the cases run before this test, how many passed (written to a file
    and printed with ``-s``)."""
    counts = collections.Counter(SECTIONS.values())
    lines = [f"{len(CASES)} bad-input cases"]
    for name, count in counts.items():
        ran = [OUTCOMES[i] for i, s in SECTIONS.items() if s == name and i in OUTCOMES]
        lines.append(f"  {name}: {count} cases, {ran.count('passed')} passed, {ran.count('failed')} failed, "
                     f"{count - len(ran)} not run")
    failed = sorted(i for i, outcome in OUTCOMES.items() if outcome == "failed")
    lines += [f"  failing: {case_id}" for case_id in failed]
    summary = "\n".join(lines)
    (tmp_path / "bad_input_summary.txt").write_text(summary + "\n")
    print(summary)
    assert len(CASES) >= 150
