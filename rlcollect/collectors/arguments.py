"""The collectors' shared arguments, each declared and documented once.

Every public constructor names its own arguments (the env source, the policy, the batch size, and
what only it takes, such as ``num_envs``) and takes the others as keyword arguments of one of the
groups here: :class:`SharedArguments` (every collector), :class:`EnvArguments` (the collectors
that step envs with a policy they are given), :class:`CollectorArguments` (the collectors whose
policy runs beside the envs) and :class:`WorkerArguments` (worker processes). The constructor
passes them on to :class:`~rlcollect.collectors.options.CollectorOptions`, which checks them once;
:func:`check_accepted` refuses an argument the class does not take, as Python refuses an
unexpected keyword argument.

Examples:
    >>> from rlcollect import Collector
    >>> sorted(SharedArguments.__optional_keys__)[:3]
    ['batch_steps', 'check', 'info_keys']
    >>> "num_envs" in Collector.accepted_arguments  # named by Collector itself, not a shared one
    False
    >>> Collector("CartPole-v1", frames_per_batch=4, prefetch=True)
    Traceback (most recent call last):
    ...
    TypeError: Collector() got an unexpected keyword argument 'prefetch'
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypedDict

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType

from rlcollect.collectors.delivery import ReplayWriter
from rlcollect.data.formats import BatchStep, Layout

__all__ = ["CollectorArguments", "EnvArguments", "SharedArguments", "WorkerArguments", "argument_names",
           "check_accepted", "named_as"]


class SharedArguments(TypedDict, total=False):
    """What every collector takes, :class:`~rlcollect.RayCollector` included.

    Attributes:
        seed: env ``i`` (over all workers) is reset with ``seed + i`` first; action spaces, the
            random policy and torch are seeded from it (``None``: unseeded).
        replay_buffer: anything with ``extend(TensorDict)``: batches are written to it (flat,
            ``[frames]``) and iteration yields ``None``; see ``start()``.
        postproc: applied to each batch before it is yielded.
        split_trajs: yield batches regrouped by trajectory, see
            :func:`~rlcollect.split_trajectories`.
        return_same_td: yield the collector's own buffer (no copy), valid until the next batch.
        storing_device: where yielded batches live (default: ``device``; else ``env_device``
            when ``policy_device`` is the same; else where they are made).
        post_collect_hook: called with each batch before it is yielded (in each worker, on its
            batch, for the multi-process collectors: it must pickle then).
        trajs_per_batch: yield exactly this many complete episodes per batch, holding partial
            ones across batches. With ``replay_buffer``, as TorchRL: each collected batch's
            complete episodes are written (flat) in one ``extend``, and one ``None`` is yielded
            per batch.
        traj_format: with ``trajs_per_batch``: ``"padded"`` (default, ``[n, max_len]`` with
            ``("collector", "mask")``) or ``"cat"`` (``[sum of lengths]``).
        weight_sync_schemes: ``{model_id: WeightSyncScheme}``: how weights reach the policy
            copies (see :mod:`rlcollect.weights`); in one process every scheme applies updates in
            place, except ``NoWeightSyncScheme`` (updates of that model change nothing).
        weight_updater: a legacy :class:`~rlcollect.weights.WeightUpdaterBase` (or its class)
            called by ``update_policy_weights_`` instead of the schemes.
        check: what is checked of the envs' and the policy's data: ``"full"`` (default: every
            value's shape and type before it is written, every batch's values against the
            spaces), ``"batch"`` (only the values, per batch) or ``"off"``; a failed check raises
            :class:`~rlcollect.data.checks.BadDataError` naming the env, the step and the value.
        obs_dtype: store floating-point observations in this dtype (``"float32"``,
            ``"float64"``, ``"float16"`` or the torch / numpy dtype), cast once as they are
            written; the policy sees them so (MuJoCo's float64 observations for a float32
            network). Integer and boolean observations are kept. ``None`` (default): the
            space's dtype.
        info_keys: keys of the envs' step infos to store, each at ``("next", "info", key)``
            (``["is_success"]``, ``["lives"]``), laid out from the first env's first step (a
            Python float is float64, an int int64); a key missing from a step's info, or a value
            of another shape or one its dtype does not hold, is a ``BadDataError``. Gymnasium
            envs, vector envs and synchronous EnvPool pools (a TorchRL env: its
            ``info_dict_reader``). ``None`` (default): none.
        layout: ``"rlcollect"`` (default: the batch layout of the docs, ``[num_envs, T]``) or a
            layout object (:class:`~rlcollect.data.formats.Layout`): TorchRL's is
            :mod:`rlcollect.torchrl.layout`'s, the default of ``rlcollect.torchrl``'s collectors.
        batch_steps: callables ``step(batch, shape) -> batch`` applied in order to each batch
            after its layout, before ``storing_device`` and ``postproc``
            (:class:`~rlcollect.data.formats.BatchStep`; they must pickle).
        replay_writer: how batches reach ``replay_buffer``
            (:class:`~rlcollect.collectors.delivery.ReplayWriter`: env by env or step by step,
            and how many complete trajectories per ``extend``); default env by env.
    """

    seed: int | None
    replay_buffer: Any
    postproc: Callable[[TensorDictBase], TensorDictBase] | None
    split_trajs: bool
    return_same_td: bool
    storing_device: Any
    post_collect_hook: Callable[[TensorDictBase], None] | None
    trajs_per_batch: int | None
    traj_format: str | None
    weight_sync_schemes: Mapping[str, Any] | None
    weight_updater: Any
    check: str
    obs_dtype: Any
    info_keys: Sequence[str] | None
    layout: str | Layout
    batch_steps: Sequence[BatchStep]
    replay_writer: ReplayWriter | None


class EnvArguments(SharedArguments, total=False):
    """What the collectors that step envs take besides :class:`SharedArguments` (the arguments of
    each of :class:`~rlcollect.RayCollector`'s actors, in its ``collector_kwargs``).

    Attributes:
        policy_factory: builds the policy (in each worker for the multi-process collectors, and
            there only: without ``policy``, worker 0 builds the policy the collector checks and
            lays its batches out from, at construction; with ``policy`` as well, ``policy`` is
            where their weights come from), or a list with one per worker (each worker its own
            policy; ``update_policy_weights_({worker: weights})`` updates one worker's).
        create_env_kwargs: keyword arguments of the env factory, or a list with one per worker.
        init_random_frames: frames collected with random actions before the policy is used,
            in whole batches, as TorchRL rounds it: a batch that starts below it is random
            (its frames stamped ``policy_version`` -1, the policy's extras 0).
        max_frames_per_traj: truncate episodes after this many steps (``None`` or negative:
            never).
        reset_at_each_iter: reset every env before each batch (the previous batch's last frames
            are marked truncated).
        set_truncated: mark the last frame of each batch truncated (and done) for the learner; the
            envs are not reset, so their episodes go on under the same trajectory ids.
        exploration_type: ``"random"`` (default), ``"deterministic"``, ``"mode"`` or ``"mean"``.
        pre_collect_hook: called before each batch (in each worker for the multi-process
            collectors: it must pickle then).
        compile_policy: ``torch.compile`` the policy (``True`` or compile kwargs): where it runs,
            in each worker or in the policy server.
    """

    policy_factory: Callable[[], Any] | Sequence[Callable[[], Any]] | None
    create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None
    init_random_frames: int
    max_frames_per_traj: int | None
    reset_at_each_iter: bool
    set_truncated: bool
    exploration_type: str | InteractionType
    pre_collect_hook: Callable[[], None] | None
    compile_policy: bool | dict[str, Any]


class CollectorArguments(EnvArguments, total=False):
    """What the collectors whose policy runs beside the envs take besides :class:`EnvArguments`
    (:class:`~rlcollect.Collector`, and with :class:`WorkerArguments` the multi-process ones).

    Attributes:
        device: default for the three devices below.
        env_device: where env outputs live (CPU for Gymnasium envs).
        policy_device: where the policy runs; a copy is made there once if needed.
        models: other modules, by model id, whose weights ``update_policy_weights_`` may update
            (``"policy"`` is always known); for worker processes they are pickled together with
            the env factory and policy, so shared objects stay shared in the worker.
    """

    device: Any
    env_device: Any
    policy_device: Any
    models: Mapping[str, torch.nn.Module] | None


class WorkerArguments(TypedDict, total=False):
    """What the collectors with worker processes take.

    Attributes:
        max_worker_restarts: restarts allowed per worker after a crash or an env error (default 3).
        timeout: seconds a worker may take to collect one batch (or answer another command)
            before it is deemed hung (and restarted); also the default bound of ``shutdown``
            (default 60).
        start_timeout: seconds a worker may take to start or restart (import torch, build its
            envs) before it is deemed hung; generous (default 120) so that a loaded machine does
            not fail at start-up.
        start_method: ``"auto"`` (default: fork while this process has no other thread and no
            CUDA, else a forkserver that preloads torch, tensordict and Gymnasium once),
            ``"spawn"``, ``"forkserver"`` or ``"fork"``.
        worker_init_fn: called with its worker index first thing in each worker process, at every
            start and restart, before the worker builds its envs and policy (to start a simulator's
            app, set up logging, ...); it must pickle (cloudpickle). As PyTorch's ``DataLoader``.
    """

    max_worker_restarts: int
    timeout: float
    start_timeout: float
    start_method: str
    worker_init_fn: Callable[[int], None] | None


def argument_names(*groups: type) -> frozenset[str]:
    """The argument names of the groups (``TypedDict`` classes) together."""
    return frozenset().union(*(group.__optional_keys__ | group.__required_keys__  # type: ignore[attr-defined]
                               for group in groups))


def check_accepted(owner: type, arguments: Mapping[str, Any]) -> None:
    """Raise ``TypeError`` for the first argument ``owner``'s constructor does not take (its
    ``accepted_arguments``), as Python does for an unexpected keyword argument."""
    accepted: frozenset[str] = getattr(owner, "accepted_arguments", frozenset())
    unknown = sorted(set(arguments) - accepted)
    if unknown:
        raise TypeError(f"{owner.__name__}() got an unexpected keyword argument {unknown[0]!r}")


@contextlib.contextmanager
def named_as(names: Mapping[str, str]) -> Iterator[None]:
    """Errors raised inside that start with an option's name (``{option: argument}``) name the
    argument the user wrote instead (``num_envs`` for the option ``num_envs_per_worker``)."""
    try:
        yield
    except (TypeError, ValueError) as error:
        message = str(error)
        for option, argument in names.items():
            if message.startswith(option):
                raise type(error)(argument + message[len(option):]) from None
        raise
