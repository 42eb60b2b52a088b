"""The parent's side of the Ray actors: start, request, wait, restart and stop them.

What :class:`~rlcollect.workers.pool.WorkerPool` is to worker processes, over Ray. Every wait has a
timeout. An actor whose batch fails (its process died, its env raised, or it answered nothing
for ``timeout`` seconds) is restarted by Ray (``max_restarts``; one we find alive but broken we
kill first, with ``ray.kill(no_restart=False)``), set up again with the next block of seeds, ids
after the ones it handed out and the current weights, and asked again for the batch it lost;
past ``max_restarts`` restarts the original exception is raised here.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable
from typing import Any

from rlcollect.distributed._bookkeeping import ActorCounters, teardown
from rlcollect.distributed._ray import describe, original_error
from rlcollect.distributed._wire import Packed
from rlcollect.distributed.actor import ActorInfo, ActorReport, ActorSpec, CollectorActor, WeightBox

__all__ = ["ActorPool"]


class ActorPool:
    """``num_actors`` Ray actors, each running a :class:`CollectorActor` built from ``spec``.

    Args:
        ray: the ``ray`` module (imported by the caller).
        spec: what every actor builds (put in the object store once).
        num_actors: actors to start.
        options: Ray actor options (``num_cpus``, ``resources``, ``runtime_env``, ...).
        max_restarts: restarts allowed per actor.
        timeout: seconds an actor may take for one batch, a request, or to come back after a restart.
        seed: env ``i`` over all actors is reset with ``seed + i`` (``None``: unseeded).
    """

    def __init__(
        self,
        ray: Any,
        spec: ActorSpec,
        *,
        num_actors: int,
        options: dict[str, Any],
        max_restarts: int,
        timeout: float,
        seed: int | None,
    ) -> None:
        self.ray = ray
        self.num_actors = num_actors
        self.max_restarts = max_restarts
        self.timeout = timeout
        self.seed = seed
        self.actors: list[Any] = []
        self.counters = [ActorCounters() for _ in range(num_actors)]
        self.versions = [0] * num_actors  # newest weights version sent to each actor
        self.weight_refs: list[dict[str, tuple[Any, int]]] = [{} for _ in range(num_actors)]
        self.next_traj = [0] * num_actors  # first free local trajectory id of each actor
        self.in_flight: dict[int, tuple[Any, float]] = {}  # actor -> (ObjectRef, sent at)
        self.ready: dict[int, tuple[Packed | None, ActorReport]] = {}  # received, not taken
        self._spec_ref = ray.put(spec)
        self._actor_class = ray.remote(CollectorActor).options(
            **options, max_restarts=max_restarts, max_task_retries=0
        )

    # -- starting -----------------------------------------------------------------------------
    def start(self) -> list[ActorInfo]:
        """Start the actors and build their collectors; return what each reported.

        Envs are seeded at their first reset, so each actor must know the index of its first env:
        actor 0 tells how many envs an actor has, then the others are built side by side.
        """
        self.actors.extend(self._actor_class.remote(a) for a in range(self.num_actors))
        infos: list[ActorInfo] = self.ask("setup", [self._setup_args(0)], [0])
        envs = infos[0].num_envs
        rest = range(1, self.num_actors)
        infos += self.ask("setup", [self._setup_args(a * envs) for a in rest], rest)
        self.num_envs_per_actor = [info.num_envs for info in infos]
        self.num_envs = sum(self.num_envs_per_actor)
        self.env_offsets = [sum(self.num_envs_per_actor[:a]) for a in range(self.num_actors)]
        self.pids = [info.pid for info in infos]
        self.hosts = [info.hostname for info in infos]
        if self.seed is not None and self.env_offsets != [a * envs for a in range(self.num_actors)]:
            self.ask("set_seed", [(self.seed + offset,) for offset in self.env_offsets])  # uneven actors
        return infos

    def _setup_args(self, env_offset: int, traj_base: int = 0, actor: int | None = None) -> tuple[Any, ...]:
        seed = None if self.seed is None else self.seed + env_offset
        weights: tuple[WeightBox, int] = (None, 0) if actor is None else self.box(actor)
        return ([self._spec_ref], seed, traj_base, *weights)

    # -- requests ------------------------------------------------------------------------------
    def ask(self, method: str, args: list[tuple[Any, ...]], actors: Iterable[int] | None = None) -> Any:
        """Call ``method`` on every actor (or on ``actors``) and return the answers.

        Raises:
            TimeoutError: no answer within ``timeout``.
            Exception: an actor's error, unwrapped to the original exception type where possible.
        """
        handles = self.actors if actors is None else [self.actors[a] for a in actors]
        refs = [getattr(actor, method).remote(*a) for actor, a in zip(handles, args, strict=True)]
        try:
            return self.ray.get(refs, timeout=self.timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"the actors did not answer {method!r} within timeout={self.timeout} s") from None
        except self.ray.exceptions.RayError as error:
            raise original_error(error) from None

    def push_weights(self, ref: Any, model_ids: Iterable[str], actors: Iterable[int]) -> None:
        """``ref`` holds new weights of ``model_ids``: bump the actors' versions; they pull it lazily."""
        for actor in actors:
            self.versions[actor] += 1
            for model_id in model_ids:
                self.weight_refs[actor][model_id] = (ref, self.versions[actor])

    def box(self, actor: int) -> tuple[WeightBox, int]:
        """The weights ``actor`` should hold and their version (refs nested: Ray does not fetch them)."""
        refs = self.weight_refs[actor]
        return ([dict(refs)] if refs else None), self.versions[actor]

    def dispatch(self, actor: int) -> None:
        """Ask ``actor`` for its next batch, naming the weights it should collect with."""
        self.in_flight[actor] = (self.actors[actor].collect.remote(*self.box(actor)), time.monotonic())

    def busy(self) -> set[int]:
        """Actors with a batch in flight or received and not yet taken."""
        return set(self.in_flight) | set(self.ready)

    def take(self, actor: int) -> tuple[Packed | None, ActorReport]:
        """The received batch of ``actor`` (and its report)."""
        return self.ready.pop(actor)

    # -- waiting -------------------------------------------------------------------------------
    def wait(self, actors: set[int], every: bool) -> None:
        """Until every one (``every``) or any one of ``actors`` has a batch ready; restart failures."""
        while True:
            have = [a for a in actors if a in self.ready]
            if have and (not every or len(have) == len(actors)):
                return
            pending = {self.in_flight[a][0]: a for a in actors if a in self.in_flight}
            if not pending:
                raise RuntimeError("waiting for batches, but none is being collected")
            deadline = min(self.in_flight[a][1] for a in pending.values()) + self.timeout
            left = max(0.0, deadline - time.monotonic())
            done, _ = self.ray.wait(list(pending), num_returns=1, timeout=left)
            for ref in done:
                self._receive(pending[ref], ref)
            if not done:
                for actor in pending.values():
                    if time.monotonic() - self.in_flight[actor][1] >= self.timeout:
                        self._recover(actor, TimeoutError(
                            f"Ray actor {actor} returned no batch within timeout={self.timeout} s"))

    def drain(self) -> None:
        """Wait for every batch in flight (kept for :meth:`take`); hand out no new one."""
        while self.in_flight:
            self.wait(set(self.in_flight), every=True)

    def _receive(self, actor: int, ref: Any) -> None:
        try:
            batch, report = self.ray.get(ref)
        except self.ray.exceptions.RayError as error:
            self._recover(actor, error)
            return
        del self.in_flight[actor]
        self.ready[actor] = (batch, report)
        self.counters[actor].last = report.stats
        self.next_traj[actor] = report.next_traj_id

    # -- faults --------------------------------------------------------------------------------
    def _recover(self, actor: int, error: BaseException) -> None:
        """Restart ``actor`` with fresh envs and ask again for its lost batch; past the budget, raise."""
        ray = self.ray
        self.in_flight.pop(actor, None)
        counters = self.counters[actor]
        while True:
            counters.restarts += 1
            counters.retire()
            if counters.restarts > self.max_restarts:
                raise original_error(error)
            warnings.warn(
                f"rlcollect Ray actor {actor} failed ({describe(error)}); "
                f"restarting it with fresh envs (restart {counters.restarts} of {self.max_restarts})",
                RuntimeWarning,
                stacklevel=2,
            )
            killed = not isinstance(error, ray.exceptions.RayActorError)  # alive but broken or hung
            if killed:
                ray.kill(self.actors[actor], no_restart=False)  # Ray starts a fresh process
            try:
                self._rebuild(actor, wait_for_new_process=killed)
                break
            except ray.exceptions.RayError as again:  # it failed again while being rebuilt
                error = again
        self.dispatch(actor)

    def _rebuild(self, actor: int, wait_for_new_process: bool) -> None:
        """Set up a restarted actor: next seeds, ids after the ones it handed out, current weights.

        ``ray.kill`` is asynchronous: after killing an actor ourselves, an answer from its old
        process (same pid and host) means the kill has not landed yet, so we ask again.
        """
        old = (self.pids[actor], self.hosts[actor])
        # as the worker pool: fresh envs get the next block of seeds
        offset = self.num_envs * self.counters[actor].restarts + self.env_offsets[actor]
        args = self._setup_args(offset, self.next_traj[actor], actor)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                info: ActorInfo = self.ray.get(
                    self.actors[actor].setup.remote(*args), timeout=max(0.0, deadline - time.monotonic())
                )
                if not (wait_for_new_process and (info.pid, info.hostname) == old):
                    break
            except self.ray.exceptions.ActorUnavailableError:  # still restarting
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray actor {actor} did not come back within timeout={self.timeout} s")
            time.sleep(0.1)
        self.pids[actor], self.hosts[actor] = info.pid, info.hostname

    # -- stopping ------------------------------------------------------------------------------
    def shutdown(self, grace: float, close_env: bool = True) -> None:
        """Close the collectors (within ``grace`` seconds) and kill every actor; idempotent."""
        pending = [ref for ref, _ in self.in_flight.values()]
        self.in_flight.clear()
        self.ready.clear()
        teardown(self.ray, self.actors, False, grace, close_env, pending)
