"""Every collector's arguments, validated, normalised and derived once: :class:`CollectorOptions`.

Each public constructor fills one :class:`CollectorOptions`; nothing downstream checks an argument
again. The options know how many steps a batch has (:meth:`CollectorOptions.steps_per_batch`),
which env each worker builds (:meth:`CollectorOptions.rollout_spec`) and what happens to a batch
after collection (:meth:`CollectorOptions.delivery`).

Examples:
    >>> options = CollectorOptions(create_env_fn="CartPole-v1", frames_per_batch=10, max_frames_per_traj=-1)
    >>> options.max_frames_per_traj is None  # <= 0 means no limit, everywhere
    True
    >>> options.steps_per_batch(4, warn=False)  # 10 frames over 4 envs: 3 steps
    3
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType

from rlcollect.collectors.checks import (
    FRAME_OVERHEAD_BYTES,
    MAX_ENVS_PER_PROCESS,
    MAX_WORKERS,
    START_METHODS,
    batch_steps,
    check_batch_memory,
    check_callable,
    check_device,
    check_env,
    check_flag,
    check_frames,
    check_frames_per_batch,
    check_info_keys,
    check_int,
    check_obs_dtype,
    check_scheme,
    check_seconds,
    check_seed,
    per_worker,
)
from rlcollect.collectors.delivery import Delivery, ReplayWriter, make_delivery
from rlcollect.common.callers import outside_stacklevel
from rlcollect.data.checks import CHECK_LEVELS, short_repr
from rlcollect.data.formats import Layout, layout_of
from rlcollect.policies.adapter import interaction_type
from rlcollect.rollout.engine import RolloutSpec
from rlcollect.weights.forms import UnknownKeyError
from rlcollect.weights.schemes import WeightSyncScheme
from rlcollect.workers.main_guard import refuse_unguarded_main

__all__ = ["CollectorOptions"]


@dataclass(frozen=True)
class CollectorOptions:
    """The arguments of every collector (see :class:`~rlcollect.Collector` and
    :class:`~rlcollect.MultiSyncCollector` for their meaning), checked once in ``__post_init__``.

    Normalisations: ``create_env_fn`` and ``create_env_kwargs`` become one entry per worker
    (``policy_factory`` too when given as a list: each worker builds its own policy);
    ``max_frames_per_traj <= 0`` becomes ``None`` (no limit); ``total_frames`` ``None`` becomes
    -1; ``init_random_frames`` ``None`` or -1 becomes 0; ``exploration_type`` an
    ``InteractionType``; devices ``torch.device`` (``device`` fills the three others);
    ``frames_per_batch`` given per worker (a list, TorchRL's form: equal values, since a batch has
    one ``T``) becomes the frames of one batch: their sum when ``sync`` (a batch holds every
    worker's frames), one worker's otherwise.

    Raises:
        TypeError, ValueError: a bad argument, named in the message with its value and what is
            allowed.
    """

    create_env_fn: Any
    policy: Any = None
    frames_per_batch: int = 1  # a per-worker list becomes the frames of one batch
    total_frames: int = -1
    num_workers: int = 1
    num_envs_per_worker: int = 1
    policy_factory: Callable[[], Any] | Sequence[Callable[[], Any]] | None = None  # one, or one per worker
    create_env_kwargs: Any = None
    init_random_frames: int = 0
    max_frames_per_traj: int | None = None
    reset_at_each_iter: bool = False
    set_truncated: bool = False
    postproc: Callable[[TensorDictBase], TensorDictBase] | None = None
    split_trajs: bool = False
    exploration_type: Any = InteractionType.RANDOM
    return_same_td: bool = False
    device: Any = None
    env_device: Any = None
    policy_device: Any = None
    storing_device: Any = None
    compile_policy: bool | Mapping[str, Any] = False
    pre_collect_hook: Callable[[], None] | None = None
    post_collect_hook: Callable[[TensorDictBase], None] | None = None
    seed: int | None = None
    models: Mapping[str, torch.nn.Module] | None = field(default_factory=dict)
    replay_buffer: Any = None
    trajs_per_batch: int | None = None
    traj_format: str | None = None
    weight_sync_schemes: Mapping[str, WeightSyncScheme] | None = None
    weight_updater: Any = None
    check: str = "full"
    obs_dtype: Any = None
    info_keys: Sequence[str] | None = ()  # becomes a tuple
    layout: str | Layout = "rlcollect"  # becomes a layout object
    batch_steps: Sequence[Any] = ()  # becomes a tuple
    replay_writer: ReplayWriter | None = None
    # a TorchRL env's policy transforms (rlcollect.torchrl's collectors take it)
    auto_register_policy_transforms: bool | None = None
    # worker processes and actors
    preemptive_threshold: float | None = None
    prefetch: bool = False
    update_at_each_batch: bool = False
    max_worker_restarts: int = 3
    timeout: float = 60.0
    start_timeout: float = 120.0
    start_method: str = "auto"
    worker_init_fn: Callable[[int], None] | None = None
    # set by RayCollector: worker processes inside each worker (an actor), and for the collector
    # inside an actor, its place among the outer workers (index, count, first trajectory id)
    nested_workers: int = 1
    placement: tuple[int, int, int] = (0, 1, 0)
    sync: bool = True  # multi-process collectors: a batch holds every worker's frames

    def __post_init__(self) -> None:
        refuse_unguarded_main()  # in a worker process importing your script: the missing guard
        self._check_envs()
        self._check_frames()
        self._check_policy()
        self._check_steps()
        self._check_devices()
        self._check_weights()
        self._check_workers()
        # the smallest batch allocated, at the fewest bytes a frame can take: a typo is named here
        envs = self.num_workers * self.num_envs_per_worker * self.nested_workers
        check_batch_memory(max(self.frames_per_batch, envs), FRAME_OVERHEAD_BYTES,
                           f"frames_per_batch={self.frames_per_batch} over {envs} envs")
        self.delivery(workers_write=False)  # its arguments are checked now, not at the first batch

    def _put(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _check_envs(self) -> None:
        """The workers, their envs and env sources."""
        workers = check_int("num_workers", self.num_workers, minimum=1, maximum=MAX_WORKERS,
                            allowed="a positive int")
        self._put("num_workers", workers)
        self._put("num_envs_per_worker", check_int("num_envs_per_worker", self.num_envs_per_worker, minimum=1,
                                             maximum=MAX_ENVS_PER_PROCESS, allowed="a positive int"))
        listed = isinstance(self.create_env_fn, (list, tuple))
        self._put("create_env_fn", per_worker("create_env_fn", self.create_env_fn, workers))
        for index, source in enumerate(self.create_env_fn if listed else self.create_env_fn[:1]):
            check_env(f"create_env_fn[{index}]" if listed else "create_env_fn", source)
        kwargs = per_worker("create_env_kwargs", self.create_env_kwargs, workers)
        for index, entry in enumerate(kwargs):
            if entry is not None and not isinstance(entry, Mapping):
                raise TypeError(f"create_env_kwargs must be a dict (or one per worker), got "
                                f"{type(entry).__name__} for worker {index}")
        self._put("create_env_kwargs", tuple(dict(entry or {}) for entry in kwargs))
        self._put("sync", check_flag("sync", self.sync))

    def _check_frames(self) -> None:
        """The frame counts."""
        frames = check_frames_per_batch(self.frames_per_batch, self.num_workers, self.sync)
        self._put("frames_per_batch", frames)
        self._put("total_frames", check_frames("total_frames", self.total_frames))
        init_random = self.init_random_frames
        if init_random is None or (isinstance(init_random, (int, np.integer)) and init_random == -1):
            init_random = 0  # -1 and None: none, as in TorchRL
        self._put("init_random_frames", check_int("init_random_frames", init_random, minimum=0,
                                            allowed="an int >= 0 (or -1 / None: none)"))
        limit = self.max_frames_per_traj
        if limit is not None:
            limit = check_int("max_frames_per_traj", limit, minimum=-(2**63),
                              allowed="an int (<= 0: no limit)")
        self._put("max_frames_per_traj", limit if limit is not None and limit > 0 else None)

    def _check_policy(self) -> None:
        """The policy, the flags, the hooks, exploration and the data checks."""
        if self.policy is not None and not callable(self.policy):
            raise TypeError(f"policy must be None, an nn.Module, a TensorDictModule or a callable; got "
                            f"{type(self.policy).__name__} {short_repr(self.policy)}")
        for name in ("reset_at_each_iter", "set_truncated", "split_trajs", "return_same_td", "prefetch",
                     "update_at_each_batch"):
            self._put(name, check_flag(name, getattr(self, name)))
        compile_policy = self.compile_policy
        if not isinstance(compile_policy, (bool, np.bool_, Mapping)):
            raise TypeError(f"compile_policy must be True, False or a dict of torch.compile arguments, got "
                            f"{short_repr(compile_policy)} ({type(compile_policy).__name__})")
        self._put("compile_policy",
            dict(compile_policy) if isinstance(compile_policy, Mapping) else bool(compile_policy))
        for name in ("pre_collect_hook", "postproc", "post_collect_hook", "worker_init_fn"):
            check_callable(name, getattr(self, name))
        factory = self.policy_factory
        if isinstance(factory, (list, tuple)):  # one per worker: a tuple, each checked
            factories = per_worker("policy_factory", factory, self.num_workers)
            for index, entry in enumerate(factories):
                check_callable(f"policy_factory[{index}]", entry)
            self._put("policy_factory", factories)
        else:
            check_callable("policy_factory", factory)
        exploration = self.exploration_type
        if not isinstance(exploration, (str, InteractionType)) and not isinstance(
                getattr(exploration, "value", None), str):
            raise TypeError(f"exploration_type must be a name ('random', 'deterministic', 'mode', 'mean') or "
                            f"an InteractionType, got {short_repr(exploration)} "
                            f"({type(exploration).__name__})")
        self._put("exploration_type", interaction_type(exploration))
        if not isinstance(self.check, str) or self.check not in CHECK_LEVELS:
            raise ValueError(f"check={self.check!r} is not one of {CHECK_LEVELS} (see rlcollect.data.checks)")
        self._put("obs_dtype", check_obs_dtype(self.obs_dtype))
        self._put("info_keys", check_info_keys(self.info_keys))

    def _check_devices(self) -> None:
        """The four devices (``device`` fills the others)."""
        device = check_device("device", self.device)
        raw_env_device = self.env_device if self.env_device is not None else device
        env_device = check_device("env_device", raw_env_device)
        if env_device is not None and env_device.type != "cpu":
            raise ValueError(f"env_device={raw_env_device!r}: Gymnasium envs run on the CPU only")
        self._put("env_device", env_device)
        for name in ("policy_device", "storing_device"):
            value = getattr(self, name)
            self._put(name, device if value is None else check_device(name, value))
        if self.storing_device is None and env_device is not None and self.policy_device == env_device:
            self._put("storing_device", env_device)  # env and policy on one device: batches are stored there

    def _check_weights(self) -> None:
        """The models, the weight-sync schemes or legacy updater, and the seed."""
        if self.models is not None and not isinstance(self.models, Mapping):
            raise TypeError(f"models must be a dict {{model_id: module}}, got {type(self.models).__name__} "
                            f"{short_repr(self.models)}")
        for model_id, module in (self.models or {}).items():
            if not isinstance(model_id, str):
                raise TypeError(f"models keys must be model ids (str), got {model_id!r}")
            if not isinstance(module, torch.nn.Module):
                raise TypeError(f"models[{model_id!r}] must be an nn.Module, got {type(module).__name__} "
                                f"{short_repr(module)}")
        self._put("models", dict(self.models or {}))
        schemes = self.weight_sync_schemes
        if schemes is not None:
            if not isinstance(schemes, Mapping):
                raise TypeError(f"weight_sync_schemes must be a dict {{model_id: WeightSyncScheme}}, got "
                                f"{type(schemes).__name__} {short_repr(schemes)}")
            checked = {model_id: check_scheme(model_id, scheme) for model_id, scheme in schemes.items()}
            schemes = {model_id: scheme for model_id, scheme in checked.items() if scheme is not None}
            known = ["policy", *(self.models or {})]
            unknown = sorted(k for k in set(checked) - set(known) if not k.startswith("env."))
            if unknown:
                raise UnknownKeyError(f"weight_sync_schemes names model(s) {unknown} this collector does not "
                                      f"have (known: {known}, and paths into the env such as "
                                      "'env.transform[0].module'; add the others with models=)")
            self._put("weight_sync_schemes", dict(schemes))
            if self.weight_updater is not None:
                raise ValueError("give weight_sync_schemes or the legacy weight_updater, not both")
        if self.weight_updater is not None and not callable(self.weight_updater):
            raise TypeError(f"weight_updater must be a WeightUpdaterBase (or its class), got "
                            f"{type(self.weight_updater).__name__} {short_repr(self.weight_updater)}")
        self._put("seed", check_seed("seed", self.seed))

    def _check_workers(self) -> None:
        """Worker processes and actors, and the regrouping of frames."""
        threshold = self.preemptive_threshold
        if threshold is not None:
            if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, float, np.number)):
                raise TypeError(f"preemptive_threshold must be a number in [0, 1] or None, got {threshold!r} "
                                f"({type(threshold).__name__})")
            if not 0.0 <= threshold <= 1.0:
                raise ValueError(f"preemptive_threshold must be a number in [0, 1] or None, "
                                 f"got {threshold!r}")
            self._put("preemptive_threshold", float(threshold))
        if not isinstance(self.start_method, str):
            raise TypeError(f"start_method must be one of {START_METHODS}, got {self.start_method!r} "
                            f"({type(self.start_method).__name__})")
        if self.start_method not in START_METHODS:
            raise ValueError(f"start_method={self.start_method!r} is not one of {START_METHODS}")
        self._put("nested_workers", check_int("num_workers", self.nested_workers, minimum=1,
                                        allowed="a positive int"))
        self._put("max_worker_restarts", check_int("max_worker_restarts", self.max_worker_restarts, minimum=0,
                                        allowed="an int >= 0"))
        self._put("timeout", check_seconds("timeout", self.timeout))
        self._put("start_timeout", check_seconds("start_timeout", self.start_timeout))
        if self.trajs_per_batch is not None:
            self._put("trajs_per_batch", check_int("trajs_per_batch", self.trajs_per_batch, minimum=1,
                                             allowed="a positive int or None"))
            for cut in ("set_truncated", "reset_at_each_iter"):  # a cut at each batch ends every episode
                if getattr(self, cut):
                    raise ValueError(f"trajs_per_batch yields complete episodes, {cut}=True cuts them at "
                                     "each batch of frames_per_batch frames: give one of the two")
        if self.traj_format is not None and not isinstance(self.traj_format, str):
            raise TypeError(f"traj_format must be 'padded', 'cat' or None, got {self.traj_format!r} "
                            f"({type(self.traj_format).__name__})")

    def _check_steps(self) -> None:
        """The layout, the batch steps and the replay writer: objects, checked here."""
        object.__setattr__(self, "layout", layout_of(self.layout))
        steps = self.batch_steps
        if not isinstance(steps, (list, tuple)) or not all(callable(step) for step in steps):
            raise TypeError(f"batch_steps must be a list of callables step(batch, shape) -> batch, got "
                            f"{short_repr(steps)}")
        object.__setattr__(self, "batch_steps", tuple(steps))
        writer = self.replay_writer
        if writer is not None and not isinstance(writer, ReplayWriter):
            raise TypeError(f"replay_writer must be a ReplayWriter or None, got {type(writer).__name__} "
                            f"{short_repr(writer)}")
        if (register := self.auto_register_policy_transforms) is not None:
            self._put("auto_register_policy_transforms", check_flag("auto_register_policy_transforms",
                                                                    register))

    def replace(self, **changes: Any) -> CollectorOptions:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    # -- what is derived from the options -----------------------------------------------------
    def steps_per_batch(self, envs_per_batch: int, *, warn: bool = True) -> int:
        """``T``: ``frames_per_batch`` over ``envs_per_batch`` envs, rounded up, and ``total_frames``
        to whole batches (:func:`~rlcollect.collectors.checks.batch_steps`), each rounding with a
        warning pointing at your call of the collector."""
        steps, notes = batch_steps(self.frames_per_batch, self.total_frames, envs_per_batch)
        for note in notes if warn else ():
            warnings.warn(note, stacklevel=outside_stacklevel())
        return steps

    def rollout_spec(self, worker: int = 0) -> RolloutSpec:
        """What worker ``worker`` (or the single process) builds its :class:`Rollout` from."""
        return RolloutSpec(
            self.create_env_fn[worker],
            self.policy,
            num_envs=self.num_envs_per_worker,
            create_env_kwargs=self.create_env_kwargs[worker],
            policy_factory=self.worker_policy_factory(worker),
            max_frames_per_traj=self.max_frames_per_traj,
            set_truncated=self.set_truncated,
            reset_at_each_iter=self.reset_at_each_iter,
            exploration_type=self.exploration_type,
            policy_device=self.policy_device,
            compile_policy=self.compile_policy,
            pre_collect_hook=self.pre_collect_hook,
            check=self.check,
            obs_dtype=self.obs_dtype,
            info_keys=tuple(self.info_keys or ()),
            models=dict(self.models or {}),
            env_models=tuple(k for k in self.weight_sync_schemes or {} if k.startswith("env.")),
            action_dtype=layout_of(self.layout).action_dtype,
            action_at_build=layout_of(self.layout).action_at_build,
            register_policy_transforms=self.auto_register_policy_transforms,
        )

    def worker_policy_factory(self, worker: int) -> Callable[[], Any] | None:
        """Worker ``worker``'s policy factory (``policy_factory`` one per worker, or one for all)."""
        factory = self.policy_factory
        return factory[worker] if isinstance(factory, tuple) else factory  # type: ignore[return-value]

    def delivery(self, *, workers_write: bool) -> Delivery:
        """The per-batch pipeline (``workers_write``: workers can extend the replay buffer)."""
        return make_delivery(
            return_same_td=self.return_same_td, storing_device=self.storing_device,
            split_trajs=self.split_trajs, postproc=self.postproc,
            post_collect_hook=self.post_collect_hook, replay_buffer=self.replay_buffer,
            trajs_per_batch=self.trajs_per_batch, traj_format=self.traj_format,
            workers_write=workers_write, layout=layout_of(self.layout),
            steps=tuple(self.batch_steps),
            writer=self.replay_writer,
        )

    def unpicklable(self, *, with_policy: bool = True) -> None:
        """Raise ``TypeError`` naming the first argument a worker cannot receive (cloudpickle);
        ``with_policy=False``: the policy stays in this process."""
        import cloudpickle

        objects: dict[str, Any] = {}
        if with_policy and self.policy_factory is not None:  # the workers build theirs: policy stays
            objects["policy_factory"] = self.policy_factory  # here, the source of their weights
        elif with_policy:
            objects["policy"] = self.policy
        objects.update(pre_collect_hook=self.pre_collect_hook, worker_init_fn=self.worker_init_fn,
                       models=self.models)
        for worker in range(self.num_workers):
            objects[f"create_env_fn[{worker}]"] = self.create_env_fn[worker]
            objects[f"create_env_kwargs[{worker}]"] = self.create_env_kwargs[worker]
        for name, value in objects.items():
            try:
                cloudpickle.dumps(value)
            except Exception as error:
                raise TypeError(
                    f"{name} ({value!r}) cannot be sent to a worker process: {error}. Define it at "
                    "module level or build it inside the env factory / policy_factory instead"
                ) from None
