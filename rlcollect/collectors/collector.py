"""The single-process collector: envs and policy in this process, batches ``[num_envs, T]``."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDictBase
from typing_extensions import Self, Unpack  # typing has them from Python 3.11

from rlcollect.collectors.arguments import CollectorArguments, argument_names, check_accepted, named_as
from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.checks import check_seed
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.slots import allocate_slots
from rlcollect.collectors.stats import CollectorStats
from rlcollect.collectors.stream import between_batches
from rlcollect.collectors.threads import warn_if_threads_compete
from rlcollect.common.state import checked_state, stamped, state_kind
from rlcollect.envs.base import source_env
from rlcollect.envs.factory import EnvSource
from rlcollect.rollout.build import make_rollout
from rlcollect.rollout.profiling import RolloutProfiler
from rlcollect.weights.forms import UnknownKeyError
from rlcollect.weights.senders import init_senders
from rlcollect.weights.staging import StagedWeights, staged_copy
from rlcollect.weights.watch import ParameterWatch, UnsentEdits

__all__ = ["Collector"]


class Collector(BaseCollector):
    """Steps ``num_envs`` envs with a policy in this process and yields ``[num_envs, T]`` batches.

    Args:
        create_env_fn: an env id, a callable returning a ``gymnasium.Env`` or ``VectorEnv``, or a
            ``VectorEnv`` or one ``gymnasium.Env`` already built (stepped as it is; each worker of
            a multi-process collector steps a copy of it).
        policy: ``None`` (uniform random actions), an ``nn.Module`` / callable from observations
            ``[N, *obs]`` to actions ``[N, *act]``, or a TensorDict policy (``policy_factory``
            builds it instead).
        frames_per_batch: frames per batch, summed over envs; rounded up to a multiple of the
            number of envs (with a warning).
        total_frames: frames to collect before iteration stops, in whole batches (20 with
            8-frame batches: 3 batches, 24 frames, as in TorchRL); -1 for no end.
        num_envs: copies of a single env stepped in this process.
        **arguments: the :class:`~rlcollect.collectors.arguments.CollectorArguments`
            (``seed``, ``device``, ``replay_buffer``, ``check``, ...).

    Examples:
        >>> collector = Collector("CartPole-v1", frames_per_batch=8, total_frames=16,
        ...                       num_envs=2, seed=0)
        >>> [batch.batch_size for batch in collector]
        [torch.Size([2, 4]), torch.Size([2, 4])]
        >>> collector.stats().frames
        16
    """

    #: The keyword arguments the constructor takes besides those it names.
    accepted_arguments: ClassVar[frozenset[str]] = argument_names(CollectorArguments)

    def __init__(
        self,
        create_env_fn: EnvSource,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_envs: int = 1,
        **arguments: Unpack[CollectorArguments],
    ) -> None:
        check_accepted(type(self), arguments)
        with named_as({"num_envs_per_worker": "num_envs"}):
            options = CollectorOptions(create_env_fn=create_env_fn, policy=policy,
                                       frames_per_batch=frames_per_batch, total_frames=total_frames,
                                       num_envs_per_worker=num_envs, **arguments)
        warn_if_threads_compete(options.policy, policy_device=options.policy_device)
        self._start(options)

    @classmethod
    def from_options(cls, options: CollectorOptions) -> Self:
        """A collector of ``options`` (checked once, by :class:`CollectorOptions`): how another
        collector, or :mod:`rlcollect.torchrl`, builds one from options it made.

        Examples:
            >>> options = CollectorOptions(create_env_fn="CartPole-v1", frames_per_batch=4)
            >>> with Collector.from_options(options) as collector:
            ...     collector.next().shape
            torch.Size([1, 4])
        """
        collector = cls.__new__(cls)
        collector._start(options)
        return collector

    def _start(self, options: CollectorOptions) -> None:
        if options.policy is not None and options.policy_factory is not None:
            raise TypeError(f"{type(self).__name__} runs one policy, in this process: give policy or "
                            "policy_factory, not both (the multi-process collectors take both: the "
                            "weights come from policy, each worker builds its copy with policy_factory)")
        self.options, self.compiled_policy = options, bool(options.compile_policy)
        self.requested_frames_per_batch = options.frames_per_batch
        self.total_frames, self.init_random_frames = options.total_frames, options.init_random_frames
        self.replay_buffer = options.replay_buffer
        self._delivery = options.delivery(workers_write=False)
        self._rollout = make_rollout(options.rollout_spec())
        self._delivery.unbatched = self._rollout.envs.unbatched
        self.num_envs = self._rollout.num_envs
        self._num_steps = num_steps = options.steps_per_batch(self.num_envs)
        self.frames_per_batch = num_steps * self.num_envs
        self._slots = allocate_slots(1, self._rollout.layout, 1, self.num_envs, num_steps, shared=False,
                                     masked=False)  # or the env's own TensorDicts, whole
        self._policy_version = 0
        acting = self._rollout.models.get("policy")
        self._policy_changes = ParameterWatch(acting)  # edits in place of the module that acts
        self._unsent = UnsentEdits(_copied_from(self._rollout.user_policy, acting))  # a device copy's source
        self._staged: StagedWeights | None = None  # background collection: updates wait for a batch
        self._profiler: RolloutProfiler | None = None
        self._closed = False
        self._rollout.set_seed(options.seed)
        schemes = options.weight_sync_schemes
        self._weight_part.senders = init_senders(schemes, self._rollout.models, "local", self)
        self.weight_updater = options.weight_updater

    @property
    def env(self) -> Any:
        """The env this collector steps, as TorchRL's ``Collector.env``: the TorchRL env (with
        the transforms the collector appended), the ``VectorEnv`` or the EnvPool pool; for
        copies of a Gymnasium env (``num_envs``), their list.

        Examples:
            >>> from rlcollect import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=4, num_envs=2) as collector:
            ...     [env.spec.id for env in collector.env]
            ['CartPole-v1', 'CartPole-v1']
        """
        return source_env(self._rollout.envs)

    @property
    def policy(self) -> Any:
        """The policy that runs (a copy where one was made: on another device, or by :meth:`start`)."""
        return getattr(self._rollout.policy, "callable", None)

    # -- collection ------------------------------------------------------------------------
    def rollout(self) -> TensorDictBase:
        """Collect one batch and return it in the collector's layout, on ``storing_device``, before
        ``split_trajs``, ``trajs_per_batch`` and ``postproc`` (as TorchRL's ``rollout()``).

        In the native layout it is the collector's buffer (no copy), overwritten by the next call:
        clone it to keep it.
        """
        return self._delivery.laid_out(self._collect())

    def _collect(self) -> TensorDictBase:
        """One batch into the collector's buffer, as collected."""
        if self._closed:
            raise self._closed_error()
        self._weight_part.poll()
        if self._staged is not None:
            self._take_staged()
        if self._profile_config is not None and self._profiler is None:
            self._profiler = RolloutProfiler(self._profile_config, worker_idx=0)
        if self._profiler is not None:
            self._profiler.before_rollout()
        if self._policy_changes.changed():  # the policy module that acts was edited in place
            self._policy_version += 1
        self._unsent.requested()
        random = self._in_warmup(self._rollout.frames)
        batch, _ = self._rollout.collect_batch(self._slots.target(0), self._num_steps, random=random,
                                               policy_version=self._policy_version)
        if self._profiler is not None:
            self._profiler.after_rollout()
        return batch

    def start(self) -> None:
        """As :meth:`BaseCollector.start`. The policy then acts in the collection thread as a copy of
        the module you passed, as a worker's does: a step of your optimizer never writes into
        weights a forward pass is reading, a change you make reaches the copy with your next
        :meth:`update_policy_weights_`, at the start of the next batch, and every frame's
        ``policy_version`` names the weights that chose it (a policy that cannot be copied acts
        itself, with a warning)."""
        if self.replay_buffer is not None and not self._background.running and self._staged is None:
            acting = self._rollout.models.get("policy")
            if _copied_from(self._rollout.user_policy, acting) is None:  # your module itself acts
                self._act_with_copy()
            self._staged = StagedWeights()
        super().start()

    def _act_with_copy(self) -> None:
        try:
            acting = self._rollout.act_with_copy()
        except Exception as error:  # noqa: BLE001 (a module holding a lock, a file, a CUDA graph)
            warnings.warn(f"start(): the policy could not be copied ({type(error).__name__}: {error}); your "
                          "module itself acts in the collection thread, and a change you make to it in place "
                          "reaches frames of a batch already stamped with the version before it",
                          RuntimeWarning, stacklevel=3)
            return
        if acting is not None:
            self._policy_changes = ParameterWatch(acting)
            self._unsent = UnsentEdits(self._rollout.user_policy)

    def _take_staged(self) -> None:
        """Apply the updates staged since the last batch (in the collection thread)."""
        assert self._staged is not None
        forms, count = self._staged.take()
        if count:
            self._apply_versions(forms, count)

    def _apply_versions(self, forms: dict[str, Any], count: int) -> None:
        """Apply ``forms`` (:meth:`Weights.apply_in_process`), the weights of ``count`` new versions."""
        self._weight_part.apply_in_process(forms)
        self._policy_version += count
        self._policy_changes.changed()  # these versions' weights: no second bump for them

    def iterator(self) -> Iterator[TensorDictBase | None]:
        while self.total_frames < 0 or self._rollout.frames < self.total_frames:
            yield from self._delivery.outputs(self._collect())

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled batch with the keys, dtypes, shape and names of the batches this collector
        yields (layout, ``storing_device`` and ``postproc`` applied; not regrouped by
        ``split_trajs`` or ``trajs_per_batch``), made without stepping an env: to preallocate a
        storage, or warm up a compiled learner.

        Examples:
            >>> from rlcollect import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=8, num_envs=2) as collector:
            ...     fake = collector.fake_tensordict()
            ...     real = collector.next()
            >>> fake.shape == real.shape, set(fake.keys(True)) == set(real.keys(True))
            (True, True)
            >>> bool(fake["observation"].any())
            False
        """
        return self._delivery.formatted(self._slots.template())

    def reset(self) -> None:
        """Reset every env now (unseeded); the next batch starts new trajectories, and
        ``trajs_per_batch`` batches hold none from before (those held are dropped, as in TorchRL)."""
        self._rollout.reset()
        self._delivery.drop_pending()

    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Stop background collection, close the envs, then raise the error background collection
        stopped on (if any, and ``raise_on_error``); idempotent."""
        if self._closed:
            return
        error = self._stop_background(time.monotonic() + (10.0 if timeout is None else timeout))
        self._closed = True
        self._stop_profiler()
        if close_env:
            self._rollout.close()
        if error is not None and raise_on_error:
            raise error

    def _stop_profiler(self) -> None:
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            profiler.stop()

    # -- seeding and state -----------------------------------------------------------------
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Reset env ``i`` now with ``seed + i``; seed action spaces, random policy and torch.

        Returns:
            ``seed + num_envs``, the first seed no env of this collector used.
        """
        checked = check_seed("seed", seed)
        if checked is None:
            raise TypeError("set_seed(seed) needs an int in [0, 2**63), got None")
        self._rollout.set_seed(checked, new_trajectories=self._rollout.batches > 0)
        return checked + self.num_envs

    def state_dict(self) -> dict[str, Any]:
        """Counters, trajectory ids, episode sums, RNG states, weights and envs (from another
        thread: once the batch under way is made)."""
        with between_batches(self._busy, self.options.timeout, "state_dict()"):
            return stamped(state_kind(type(self)), {"policy_version": self._policy_version,
                                              "rollout": self._rollout.state_dict()})

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`: the next batches equal the uninterrupted run's.

        Raises:
            TypeError, ValueError: not this collector class's state, or one of other envs (named).
        """
        state = checked_state(state_kind(type(self)), state_dict, ["policy_version", "rollout"])
        self._rollout.load_state_dict(state["rollout"])
        self._policy_version = int(state["policy_version"])
        self._policy_changes.changed()  # the weights loaded are this version's

    def _drain_episodes(self) -> dict[str, np.ndarray]:
        return self._rollout.episodes.records.drain()

    def stats(self) -> CollectorStats:
        rollout = self._rollout
        returns, lengths = rollout.episodes.returns, rollout.episodes.lengths
        return CollectorStats(
            frames=rollout.frames,
            batches=rollout.batches,
            fps=rollout.frames / rollout.collect_seconds if rollout.collect_seconds else 0.0,
            episodes=rollout.episodes.count,
            mean_return=float(np.mean(returns)) if returns else math.nan,
            mean_length=float(np.mean(lengths)) if lengths else math.nan,
            policy_version=self._policy_version,
            startup_seconds=0.0,
        )

    def _set_pre_collect_hook(self, hook: Callable[[], None] | None) -> None:
        self._rollout.spec = dataclasses.replace(self._rollout.spec, pre_collect_hook=hook)

    # -- weights ---------------------------------------------------------------------------
    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        self._weight_part.update_in_process(forms, self._rollout.user_policy)

    def _apply_received(self, forms: dict[str, Any]) -> None:
        """Weights from upstream (``None``: already applied by a receiver scheme); bumps the version.
        While collecting in the background, they are checked and copied here and applied by the
        collection thread before its next batch."""
        if self._staged is not None:
            self._staged.put({m: None if s is None else staged_copy(m, s, self.receiver_model(m))
                              for m, s in forms.items()})
        else:
            self._apply_versions(forms, 1)
        self._weights_sent()

    def _weights_sent(self) -> None:
        self._unsent.sent()

    def _model_ids(self) -> list[str]:
        return list(self._rollout.models)

    def receiver_model(self, model_id: str) -> torch.nn.Module:
        try:
            return self._rollout.module(model_id)
        except KeyError as error:  # also a ValueError: an unknown model id is a bad argument value
            raise UnknownKeyError(error.args[0] if error.args else model_id) from None


def _copied_from(user_policy: Any, acting: torch.nn.Module | None) -> torch.nn.Module | None:
    """The module you passed where another one, a copy of it on the policy's device, acts."""
    if not isinstance(user_policy, torch.nn.Module) or acting is None:
        return None
    same = {id(p) for p in user_policy.parameters()} == {id(p) for p in acting.parameters()}
    return None if same else user_policy
