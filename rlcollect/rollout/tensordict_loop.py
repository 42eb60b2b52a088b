"""The rollout of TorchRL envs whose data the batch buffers cannot hold, tensordict by tensordict.

Several action, reward or done keys (multi-agent groups with dims of their own), batch sizes of
two or more dims, heterogeneous (lazily stacked) or non-tensor specs: such an env is a
:class:`~rlcollect.envs.torchrl_tensordict.TensorDictEnv`, and its steps are kept as TorchRL's collector
keeps them. Per step: the policy writes its outputs into the root tensordict (``policy(root)``;
``env.rand_action`` without a policy or during ``init_random_frames``), the env steps and resets
where it ended (``step_and_maybe_reset``), the root with its ``"next"`` is the frame. A batch is
the ``T`` frames stacked along a last dim named ``"time"``: ``[*env.batch_size, T]``, with the
env's and the policy's keys as they are, ``("collector", "traj_ids")`` and ``"policy_version"``.

A trajectory ends where any done entry of the frame's ``"next"`` is set (any agent's); trajectory
ids and episode statistics (the return: every reward entry summed, all agents) are the engine's
own, over the env's batch flattened (env ``i`` is row ``i`` of ``batch.reshape(-1, T)``). The
frames keep the env's and the policy's own tensors: the first batch copies each frame at its step
and compares at its end, and an env (or policy) that changed a tensor it returned (its state,
returned as it is and incremented in place) is a ``BadDataError``: every frame would hold its last
value.

Examples:
    >>> from torchrl.testing.mocking_classes import NestedCountingEnv
    >>> from rlcollect.envs.torchrl_tensordict import TensorDictEnv
    >>> rollout = TensorDictRollout(RolloutSpec(None), TensorDictEnv(NestedCountingEnv(), "nested"))
    >>> rollout.set_seed(0)
    >>> batch = rollout.collect(4)
    >>> batch.batch_size, batch["next", "data", "reward"].shape, batch.names
    (torch.Size([4]), torch.Size([4, 3, 1]), ['time'])
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase
from tensordict.nn import set_interaction_type

from rlcollect.common.generators import generator_states, restore_generators, seed_generators
from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.checks import BadDataError
from rlcollect.data.trajectories import TrajectoryIds
from rlcollect.envs.torchrl_tensordict import TensorDictEnv
from rlcollect.policies.random_policy import RANDOM_VERSION
from rlcollect.rollout.engine import POLICY_FROM_SPEC, RolloutSpec, build_policy
from rlcollect.rollout.episodes import EpisodeTracker
from rlcollect.rollout.models import ModelLookup, copy_weights, env_modules

__all__ = ["TensorDictRollout"]


def _leaves(data: TensorDictBase, floating: bool = False, prefix: tuple[str, ...] = ()) -> Any:
    """``(key, tensor)`` of every tensor leaf (``floating``: floating-point ones only), the parts
    of lazy stacks one by one (their shapes may differ: heterogeneous agents)."""
    if isinstance(data, LazyStackedTensorDict):
        for part in data.tensordicts:
            yield from _leaves(part, floating, prefix)
        return
    for key, value in data.items():
        if isinstance(value, TensorDictBase):
            yield from _leaves(value, floating, (*prefix, key))
        elif isinstance(value, torch.Tensor) and (value.is_floating_point() or not floating):
            yield (*prefix, key), value


def _clean(value: torch.Tensor, finite: bool) -> bool:
    """Whether ``value`` holds no NaN (``finite``: no infinity either): its least and greatest
    values, one pass without temporaries (NaN propagates to both; a twentieth of the time of an
    elementwise test over a batch of VMAS's)."""
    if not value.numel():
        return True
    least, most = torch.aminmax(value)
    return bool(torch.isfinite(least) & torch.isfinite(most)) if finite else not bool(torch.isnan(most))


def _check_unchanged(returned: list[TensorDictBase], copies: list[TensorDictBase]) -> None:
    """Raise if a tensor of a frame (what the env or the policy returned at a step) holds other
    values now than its copy taken then: it was changed in place afterwards, so the frames would
    not hold their own step's values."""
    for step, (now, then) in enumerate(zip(returned, copies, strict=True)):
        for (key, value), (_, copy) in zip(_leaves(now), _leaves(then), strict=True):
            if not bool(((value == copy) | (value.isnan() & copy.isnan())).all()):
                raise BadDataError(
                    f"entry {key!r}", None, step,
                    "was changed by the env or the policy after its step (a tensor returned as it is, "
                    "such as the env's state, then changed in place: every frame would hold its last "
                    "value, as TorchRL's collectors store it); return a new tensor at each step "
                    "(state.clone())")


@dataclass
class _Policy:
    """What the collector asks of the policy that runs (as a :class:`PolicyAdapter` has)."""

    callable: Any
    module: torch.nn.Module | None


class TensorDictRollout(ModelLookup):
    """Collects batches of a :class:`TensorDictEnv`; see the module docstring.

    The single-process collector and the workers run it in place of a
    :class:`~rlcollect.rollout.engine.Rollout` (same counters, seeding, ids, statistics and state;
    the placement arguments are the ``Rollout``'s). A worker sends each batch back whole.
    """

    def __init__(self, spec: RolloutSpec, envs: TensorDictEnv, *, env_offset: int = 0, traj_stride: int = 1,
                 traj_offset: int = 0, traj_start: int = 0, user_policy: Any = POLICY_FROM_SPEC) -> None:
        off_cpu = spec.policy_device is not None and torch.device(spec.policy_device).type != "cpu"
        unsupported = {"obs_dtype": spec.obs_dtype, "compile_policy": spec.compile_policy,
                       "policy_device": spec.policy_device if off_cpu else None}
        for name, value in unsupported.items():
            if value:
                raise ValueError(f"{name}={value!r} is not available for this TorchRL env, whose "
                                 f"data is kept as the env gives it: {envs.reason}")
        self.spec, self.envs = spec, envs
        self.num_envs = envs.num_envs
        self.user_policy = build_policy(spec) if user_policy is POLICY_FROM_SPEC else user_policy
        if self.user_policy is not None:
            envs.prepare_policy(self.user_policy)
        module = self.user_policy if isinstance(self.user_policy, torch.nn.Module) else None
        self.policy = _Policy(self.user_policy, module)
        self.models: dict[str, torch.nn.Module] = {**spec.models, **env_modules(self.envs, spec.env_models)}
        if module is not None:
            self.models["policy"] = module
        self.env_offset = env_offset  # this process's first env among the collector's (seeds, statistics)
        self.traj_ids = TrajectoryIds(self.num_envs, stride=traj_stride, offset=traj_offset, start=traj_start)
        self.episodes = EpisodeTracker(self.num_envs, env_offset=env_offset)
        self.check = spec.check != "off"
        self.frames = self.batches = 0
        self.collect_seconds = 0.0
        self._root: TensorDictBase | None = None
        self._watch = True  # the first checked batch sees that the env leaves what it returned alone

    def set_check(self, check: str) -> None:
        """``"off"``: no check of the batches; else every floating-point entry must be finite."""
        self.check = check != "off"

    #: batches are the env's own TensorDicts, made by :meth:`collect`: no batch buffers
    layout = None

    # -- collection ------------------------------------------------------------------------
    def collect_batch(self, buffers: BatchBuffers | None, num_steps: int, *, random: bool = False,
                      policy_version: int = 0, stop: np.ndarray | None = None) -> tuple[TensorDictBase, int]:
        """The :class:`~rlcollect.rollout.build.Engine` form of :meth:`collect` (no buffers, no
        preemption): the batch and its ``num_steps`` steps."""
        return self.collect(num_steps, random=random, policy_version=policy_version), num_steps

    def collect(self, num_steps: int, *, random: bool = False, policy_version: int = 0) -> TensorDictBase:
        """Collect ``num_steps`` steps of every env; return the batch ``[*batch_size, T]``."""
        if self.spec.pre_collect_hook is not None:
            self.spec.pre_collect_hook()
        if self.spec.reset_at_each_iter and self.batches > 0:
            self.reset()
        if self._root is None:
            self._reset(None)
        start = time.perf_counter()
        frames = []
        watched: list[TensorDictBase] | None = [] if self._watch and self.check else None  # copies
        root = self._root
        assert root is not None
        with torch.no_grad(), set_interaction_type(self.spec.exploration_type):
            for t in range(num_steps):
                if random or self.user_policy is None:
                    root = self.envs.rand_action(root)
                else:
                    root = self._act(root, t)
                frame, root = self.envs.step(root)
                frames.append(frame)
                if watched is not None:
                    watched.append(frame.clone())
        self._root = root
        if watched is not None:  # the first checked batch: each step's values are still there
            _check_unchanged(frames, watched)
            self._watch = False
        batch = LazyStackedTensorDict.maybe_dense_stack(frames, -1)
        self._finish(batch, num_steps, RANDOM_VERSION if random else policy_version)
        self.collect_seconds += time.perf_counter() - start
        self.frames += num_steps * self.num_envs
        self.batches += 1
        return batch

    def _act(self, root: TensorDictBase, t: int) -> TensorDictBase:
        out = self.policy.callable(root)
        if not isinstance(out, TensorDictBase):
            raise TypeError(f"policy {type(self.user_policy).__name__} returned {type(out).__name__} at "
                            f"step {t}; with this TorchRL env ({self.envs.reason}) the policy takes the "
                            "root TensorDict and writes its actions into it (a TensorDictModule)")
        return out

    def _finish(self, batch: TensorDictBase, num_steps: int, policy_version: int) -> None:
        """Ids, versions, flags of a collector cut, statistics and checks of one batch."""
        shape = batch.batch_size
        nxt = batch.get("next")
        done = self.envs.ends(nxt).reshape(self.num_envs, num_steps).numpy()
        self.episodes.update(self.envs.rewards(nxt).reshape(self.num_envs, num_steps).numpy(), done)
        ids = np.empty((self.num_envs, num_steps), dtype=np.int64)
        self.traj_ids.assign(done, ids)  # the env's episodes, as TorchRL's: a cut keeps the episode's id
        if self.spec.truncates_last:  # a collector cut: the trajectories end here for the learner
            self._truncate_last(nxt)
        versions = np.full((self.num_envs, num_steps), policy_version, dtype=np.int64)
        self.episodes.label(ids, versions)
        batch.set(("collector", "traj_ids"), torch.from_numpy(ids).reshape(shape))
        batch.set("policy_version", torch.from_numpy(versions).reshape(shape))
        batch.names = [None] * (batch.batch_dims - 1) + ["time"]
        if self.check:
            self._check(batch)

    def _truncate_last(self, nxt: TensorDictBase) -> None:
        """The last frame's ``done`` and ``truncated`` entries set (``terminated`` left as the env
        said), as TorchRL's ``set_truncated`` does: the learner sees the trajectory end there; the env
        goes on, under the same trajectory id."""
        time_dim = len(self.envs.batch_size)
        for key in self.envs.done_keys:
            if key[-1] in ("done", "truncated"):
                nxt.get(key).select(time_dim, -1).fill_(True)

    def _check(self, batch: TensorDictBase) -> None:
        """Every floating-point entry the env writes is finite, and what the policy writes beside
        its action free of NaN (an inf may be meant: the logits of masked actions), as the
        native engine checks (bad data is an error, never handed out)."""
        frame_dims = batch.batch_size[: len(self.envs.batch_size) + 1]
        for key, value in _leaves(batch, floating=True):
            finite = key in self.envs.env_keys
            if _clean(value, finite):
                continue
            bad = ~value.isfinite() if finite else value.isnan()
            env = step = None
            if value.shape[: len(frame_dims)] == frame_dims:  # locate the first bad frame
                frames = bad.reshape(self.num_envs, frame_dims[-1], -1).any(-1)
                env, step = (int(i) for i in frames.nonzero()[0])
            detail = "is not finite (NaN or infinite)" if finite else "holds NaN"
            raise BadDataError(".".join(key), env, step, detail, self.batches)

    # -- resets and seeds ------------------------------------------------------------------
    def _reset(self, seed: int | None) -> None:
        self._root = self.envs.reset(seed)
        self.episodes.abandon()

    def reset(self) -> None:
        """Reset every env now (unseeded); the next batch starts new trajectories."""
        self._reset(None)
        self.traj_ids.restart()

    def set_seed(self, seed: int | None, *, new_trajectories: bool = False) -> None:
        """Reset the envs with ``seed + env_offset`` (TorchRL seeds env ``i`` with that plus ``i``)
        and seed the global generators with it."""
        self._reset(None if seed is None else seed + self.env_offset)
        if seed is not None:
            seed_generators(seed + self.env_offset)
        if new_trajectories:
            self.traj_ids.restart()

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters, ids, episode sums, RNG state and weights (not the env's: see load_state_dict)."""
        return {
            "frames": self.frames, "batches": self.batches,
            "traj_ids": self.traj_ids.state_dict(), "episodes": self.episodes.state_dict(),
            "models": copy_weights(self.models),
            "rng": generator_states(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`. The env is not in it: it goes on with its own episode
        (this rollout's next root, running return and step count) under a new trajectory id, so
        no frame pairs the saved env's observation with a step of this one."""
        self.frames, self.batches = int(state["frames"]), int(state["batches"])
        self.traj_ids.continue_after(state["traj_ids"])
        self.episodes.load_state_dict(state["episodes"], running=False)
        for model_id, weights in state["models"].items():
            self.module(model_id).load_state_dict(weights)
        restore_generators(state["rng"])

    def close(self) -> None:
        """Close the env."""
        self.envs.close()
