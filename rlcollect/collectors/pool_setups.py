"""What each worker of a collector is given when it starts or restarts: its setup (its rows of
the slots, its weights receiver, its place and seeds) and its rollout spec, pickled once for the
workers that share one while they start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import cloudpickle

from rlcollect.collectors.delivery import Delivery, WorkerHook
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.slots import Slots
from rlcollect.rollout.engine import RolloutSpec
from rlcollect.weights.schemes import WeightChannel
from rlcollect.workers.worker import WorkerSetup

__all__ = ["WorkerSetups"]


class WorkerSetups:
    """The workers' setups.

    ``options`` are the collector's when it was built (its env sources, placement and policy
    factories); ``arguments`` the :class:`~rlcollect.workers.worker.WorkerSetup` fields every worker gets;
    ``shared``: the workers write the slots' shared memory (else their batches come back in
    their reports); ``hooks``: the collector's delivery, where ``post_collect_hook`` runs in each
    worker; ``finish(worker)`` is the collector's final spec for a worker (built on
    :meth:`rollout_spec`)."""

    def __init__(self, options: CollectorOptions, slots: Slots, weights: WeightChannel,
                 arguments: dict[str, Any], *, num_workers: int, shared: bool, hooks: Delivery | None,
                 finish: Callable[[int], RolloutSpec]) -> None:
        self.options, self.slots, self.weights, self.arguments = options, slots, weights, arguments
        self.num_workers, self.shared, self.hooks, self.finish = num_workers, shared, hooks, finish
        self._specs: dict[int, bytes] = {}  # pickled rollout specs, kept while the workers start

    def setup(self, worker: int) -> WorkerSetup:
        """Worker ``worker``'s setup with the current weights (at its start, and at a restart)."""
        options, envs = self.options, self.slots.envs_per_worker
        index = options.placement[0] * self.num_workers + worker  # (inside an outer collector's worker)
        rows = slice(worker * envs, (worker + 1) * envs)
        return WorkerSetup(
            worker_idx=index, spec=self.spec(worker), env_offset=index * envs,
            weights=self.weights.receiver(worker),
            slots=self.slots.storages(rows) if self.shared else None,
            own_weights=isinstance(options.policy_factory, tuple), **self.arguments,
        )

    def spec(self, worker: int) -> bytes:
        """Worker ``worker``'s rollout spec, pickled (the policy with it): once for all the workers
        whose env source is the same while they start, again for a restart."""
        options = self.options
        same = (options.create_env_fn[worker] is options.create_env_fn[0]
                and options.create_env_kwargs[worker] == options.create_env_kwargs[0]
                and options.worker_policy_factory(worker) is options.worker_policy_factory(0))
        key = 0 if same else worker
        if key not in self._specs:
            self._specs[key] = cloudpickle.dumps(self.finish(key))
        return self._specs[key]

    def forget(self) -> None:
        """The specs are made from the options again (the workers started, or a hook changed)."""
        self._specs.clear()

    def rollout_spec(self, worker: int, options: CollectorOptions) -> RolloutSpec:
        """What worker ``worker`` builds its rollout from, by ``options`` (the collector's now: a
        hook set since it was built included); its policy from ``policy_factory`` if given, even
        with ``policy``: that one stays here as the source of the weights."""
        spec = dataclasses.replace(options.rollout_spec(worker),  # info_keys: laid out as the slots
                                   info_fields=self.slots.infos)
        hook = options.post_collect_hook
        if self.hooks is not None and hook is not None:  # one worker's rows, in the collector's layout
            rows = dataclasses.replace(self.hooks, workers=1, replay_buffer=None, postproc=None,
                                       storing_device=None, post_collect_hook=None)
            spec = dataclasses.replace(spec, post_collect_hook=WorkerHook(hook, rows))
        return spec if spec.policy_factory is None else dataclasses.replace(spec, policy=None)
