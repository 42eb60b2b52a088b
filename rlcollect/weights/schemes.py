"""Weight-sync schemes: how the weights of one model travel from a sender to its receivers.

A collector maps each model id to a scheme (``weight_sync_schemes={"policy": scheme}``); the
collector initialises it on the sender side and every ``update_policy_weights_`` goes through it.
A scheme is initialised on one side only: the sender (``init_on_sender``, then ``send``) or the
receiver (``init_on_receiver``, ``connect``, then ``receive``, which applies the weights to the
receiver's model).

=================================== ===================================================================
scheme                               how the weights travel
=================================== ===================================================================
:class:`SharedMemWeightSyncScheme`   shared memory, versioned (default for worker processes): written
                                     once, workers run on the shared copy from their next batch
:class:`MultiProcessWeightSyncScheme` pickled into the workers' pipes with the next batch request
:class:`RayWeightSyncScheme`         one ``ray.put`` per update, pulled by version (default for Ray)
:class:`NoWeightSyncScheme`          not at all: workers keep the weights they started with
``DistributedWeightSyncScheme``      ``torch.distributed`` broadcast from a learner process to
                                     collectors in other processes or on other machines
=================================== ===================================================================

The models of one collector move together through one channel, so ``weights_dict`` updates are
atomic: every model id uses the same scheme class, or :class:`NoWeightSyncScheme`.

Examples:
    >>> import torch
    >>> scheme = SharedMemWeightSyncScheme()
    >>> policy = torch.nn.Linear(2, 1)
    >>> scheme.init_on_sender(model_id="policy", model=policy, num_workers=1)
    >>> receiving = torch.nn.Linear(2, 1)
    >>> receiver = scheme.receiver(worker_idx=0)  # picklable: give it to another process
    >>> receiver.init_on_receiver(model_id="policy", model=receiving)
    >>> scheme.send()  # the sender model's current weights, version 1
    >>> receiver.receive() is not None, bool((receiving.weight == policy.weight).all())
    (True, True)
    >>> receiver.receive() is None  # nothing newer
    True
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.weights.context import context_model
from rlcollect.weights.forms import apply_weights, as_weights
from rlcollect.weights.frozen import FrozenWeights
from rlcollect.weights.store import WeightStore, WorkerWeights

__all__ = [
    "MultiProcessWeightSyncScheme",
    "NoWeightSyncScheme",
    "RayWeightSyncScheme",
    "SharedMemWeightSyncScheme",
    "WeightChannel",
    "WeightSyncScheme",
]

Strategy = Literal["tensordict", "state_dict"]
_STRATEGIES = ("tensordict", "state_dict")


class WeightReceiver(Protocol):
    """A worker's side of a channel (picklable)."""

    def pull(self, modules: Mapping[str, torch.nn.Module], seen: int, payload: Any = None) -> int:
        """Apply the models written after version ``seen``; return the version now held."""


class WeightChannel(Protocol):
    """What a collector needs from a scheme's sender side: one channel carries all its models."""

    @property
    def versions(self) -> Any:
        """The newest version written for each worker (a sequence of ints)."""

    def push(self, weights: Mapping[str, TensorDictBase], worker_ids: Iterable[int]) -> None:
        """Write ``{model_id: weights}`` for ``worker_ids`` (checked first: a rejected push changes
        nothing) and bump their versions."""

    def payload(self, worker_idx: int) -> Any:
        """What travels with each batch request of ``worker_idx``."""

    def receiver(self, worker_idx: int) -> WeightReceiver:
        """What a (re)started worker pulls its weights with."""

    def release(self, worker_idx: int) -> None:
        """``worker_idx`` reported its batch (it runs with no weights until its next request)."""

    def weight_bytes(self) -> int:
        """Bytes of weights this channel holds (shared memory, copies, object store)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class WeightSyncScheme:
    """How the weights of one model travel; initialised on the sender or on the receiver side.

    Args:
        strategy: ``"tensordict"`` (weights as a nested TensorDict of parameters and buffers,
            applied in place) or ``"state_dict"`` (``module.state_dict()``, applied with
            ``load_state_dict``: for modules with a custom state dict).

    Raises:
        ValueError: an unknown ``strategy``.
    """

    #: the transports whose workers this scheme can feed ("process", "ray", "local")
    transports: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, strategy: Strategy = "tensordict") -> None:
        if strategy not in _STRATEGIES:
            raise ValueError(f"strategy={strategy!r} is not one of {_STRATEGIES}")
        self._strategy: Strategy = strategy
        self._side: str | None = None
        self.model_id: str | None = None
        self.worker_idx: int | None = None
        self.synchronized_on_receiver = False
        self._context: weakref.ReferenceType[Any] | None = None
        self._model: torch.nn.Module | None = None

    @property
    def strategy(self) -> Strategy:
        """``"tensordict"`` or ``"state_dict"``."""
        return self._strategy

    @property
    def initialized_on_sender(self) -> bool:
        return self._side == "sender"

    @property
    def initialized_on_receiver(self) -> bool:
        return self._side == "receiver"

    @property
    def context(self) -> Any:
        """The collector this scheme serves (sender side) or feeds (receiver side), if any."""
        return None if self._context is None else self._context()

    @property
    def model(self) -> torch.nn.Module | None:
        """The model weights are read from (sender) or written to (receiver)."""
        return self._model

    def _claim(self, side: str, model_id: str, context: Any) -> None:
        if self._side is not None and self._side != side:
            raise RuntimeError(f"{type(self).__name__} cannot be initialized on both sender and receiver "
                               f"(it is the {self._side} of model {self.model_id!r}): give each side its "
                               "own scheme object")
        if self._side == side and (self.model_id != model_id or self.context is not context):
            raise RuntimeError(f"{type(self).__name__} is already initialized on the {side} side for model "
                               f"{self.model_id!r}{_of(self.context)}: give each collector and model its "
                               "own scheme object")
        self._side, self.model_id = side, model_id
        self._context = None if context is None else weakref.ref(context)

    # -- sender side ----------------------------------------------------------------------------
    def init_on_sender(
        self, *, model_id: str, context: Any = None, model: torch.nn.Module | None = None,
        num_workers: int = 1, **kwargs: Any,
    ) -> None:
        """Become the sender of ``model_id``: for ``context`` (a collector, which calls this), or on
        its own for ``model`` and ``num_workers`` receivers (see :meth:`receiver`).

        Raises:
            RuntimeError: the scheme is a receiver, or already the sender of another model or
                collector.
        """
        self._claim("sender", model_id, context)
        self._model = model
        if context is None:
            if model is None:
                raise ValueError("init_on_sender needs a collector (context=) or a model (model=)")
            self._standalone(model_id, model, num_workers, **kwargs)

    def _standalone(self, model_id: str, model: torch.nn.Module, num_workers: int, **kwargs: Any) -> None:
        raise RuntimeError(f"{type(self).__name__} feeds a collector's own workers: pass it to the collector "
                           "(weight_sync_schemes=) instead of initialising it alone")

    def prepare_weights(self, weights: Any = None, model_id: str | None = None,
                        strategy: Strategy | None = None) -> TensorDictBase:
        """``weights`` (a module, a TensorDict or a dict; ``None``: the sender's model) as a
        TensorDict, extracted with the scheme's strategy."""
        source = self._model if weights is None else weights
        if source is None:
            raise ValueError(f"no weights to send for {model_id or self.model_id!r}: pass them")
        if (strategy or self._strategy) == "state_dict" and isinstance(source, torch.nn.Module):
            return as_weights(source.state_dict(keep_vars=False))
        return as_weights(source)

    def send(self, weights: Any = None, worker_ids: int | list[int] | None = None) -> None:
        """Send ``weights`` (``None``: the sender's model) to the receivers (``worker_ids``: some).

        Raises:
            RuntimeError: the scheme is not initialised on the sender side.
        """
        if not self.initialized_on_sender:
            raise RuntimeError(f"{type(self).__name__}.send() needs init_on_sender() first")
        collector = self.context
        if collector is not None:
            collector.update_policy_weights_(weights, model_id=self.model_id, worker_ids=worker_ids)
            return
        self._send_standalone(self.prepare_weights(weights), worker_ids)

    def _send_standalone(self, weights: TensorDictBase, worker_ids: Any) -> None:
        raise NotImplementedError

    def channel(self, models: Mapping[str, torch.nn.Module], num_workers: int) -> WeightChannel:
        """The collector's channel for ``models`` (all the model ids this scheme class serves)."""
        raise NotImplementedError

    # -- receiver side --------------------------------------------------------------------------
    def init_on_receiver(
        self, *, model_id: str, context: Any = None, model: torch.nn.Module | None = None,
        worker_idx: int | None = None, **kwargs: Any,
    ) -> None:
        """Become a receiver of ``model_id``: weights received are applied to ``model`` (default:
        the ``context`` collector's module of that id).

        Raises:
            RuntimeError: the scheme is a sender, or already the receiver of another model.
        """
        self._claim("receiver", model_id, context)
        if model is None and context is not None:
            model = context_model(context, model_id)
        if model is None:
            raise ValueError("init_on_receiver needs the model the weights are applied to (model=)")
        self._model = model
        self.worker_idx = worker_idx if worker_idx is not None else (self.worker_idx or 0)
        self._init_receiver(**kwargs)

    def _init_receiver(self, **kwargs: Any) -> None:
        raise RuntimeError(f"{type(self).__name__}'s receivers are a collector's own workers; to feed a "
                           "collector from another process use SharedMemWeightSyncScheme (same machine) "
                           "or DistributedWeightSyncScheme (any machine)")

    def connect(self, *, worker_idx: int | None = None) -> bool:
        """Initial synchronisation: a receiver applies the weights sent so far; returns whether it
        applied any."""
        applied = self.initialized_on_receiver and self.receive() is not None
        self.synchronized_on_receiver = True
        return applied

    def receive(self, timeout: float | None = None) -> TensorDictBase | None:
        """Apply the newest weights if they are newer than those held; return them, else ``None``.

        Raises:
            RuntimeError: the scheme is not initialised on the receiver side.
        """
        if not self.initialized_on_receiver:
            raise RuntimeError(f"{type(self).__name__}.receive() needs init_on_receiver() first")
        return self._receive(timeout)

    def _receive(self, timeout: float | None) -> TensorDictBase | None:
        raise NotImplementedError

    def apply_weights(self, weights: TensorDictBase) -> None:
        """Apply ``weights`` to the receiver's model with the scheme's strategy."""
        assert self._model is not None
        if self._strategy == "state_dict":
            self._model.load_state_dict(dict(weights.flatten_keys(".").items()))
        else:
            apply_weights(self._model, weights, self.model_id or "policy")

    def shutdown(self) -> None:
        """Release what the scheme holds (threads, process groups)."""

    def __repr__(self) -> str:
        side = self._side or "not initialized"
        return f"{type(self).__name__}(strategy={self._strategy!r}, {side}, model_id={self.model_id!r})"


def _of(collector: Any) -> str:
    return "" if collector is None else f" of {type(collector).__name__}"


class SharedMemWeightSyncScheme(WeightSyncScheme):
    """Weights in shared memory, versioned: the default for worker processes.

    A collector writes each update once into a shared copy; from its next batch each worker's
    policy runs on that copy, and a copy is never written while a worker runs on it (see
    :mod:`rlcollect.weights.store`), so no batch runs with half an update. Alone
    (``init_on_sender(model_id=..., model=..., num_workers=N)``), it feeds ``N`` receivers in
    other processes on this machine: pickle :meth:`receiver` to them.
    """

    transports: ClassVar[frozenset[str]] = frozenset({"process", "local"})
    _source: WorkerWeights  # a receiver's view of the sender's store
    _store: WeightStore  # a sender's store, when initialised alone

    def channel(self, models: Mapping[str, torch.nn.Module], num_workers: int) -> WeightChannel:

        return WeightStore(models, num_workers)

    def _standalone(self, model_id: str, model: torch.nn.Module, num_workers: int, **kwargs: Any) -> None:
        self._store = WeightStore({model_id: model}, num_workers)

    def _send_standalone(self, weights: TensorDictBase, worker_ids: Any) -> None:
        workers = range(len(self._store.versions)) if worker_ids is None else (
            [worker_ids] if isinstance(worker_ids, int) else worker_ids)
        assert self.model_id is not None
        self._store.push({self.model_id: weights}, workers)

    def receiver(self, worker_idx: int = 0) -> SharedMemWeightSyncScheme:
        """A scheme to initialise on the receiver side, in this process or another (picklable)."""
        if not hasattr(self, "_store"):
            raise RuntimeError("receiver() needs init_on_sender(model_id=..., model=..., num_workers=...)")
        count = len(self._store.versions)
        if (isinstance(worker_idx, (bool, np.bool_)) or not isinstance(worker_idx, (int, np.integer))
                or not 0 <= worker_idx < count):
            raise ValueError(f"receiver(worker_idx={worker_idx!r}): this sender serves num_workers={count} "
                             f"receivers, so worker_idx must be an int in [0, {count})")
        worker_idx = int(worker_idx)
        other = SharedMemWeightSyncScheme(self._strategy)
        other.worker_idx = worker_idx
        other._source = self._store.receiver(worker_idx)
        return other

    def _init_receiver(self, **kwargs: Any) -> None:
        if not hasattr(self, "_source"):
            raise RuntimeError("a SharedMemWeightSyncScheme receiver comes from the sender's "
                               "receiver(worker_idx)")
        self._source.bind = False  # the sender does not know when this receiver uses its model
        self._seen = 0

    def _receive(self, timeout: float | None) -> TensorDictBase | None:
        assert self._model is not None and self.model_id is not None
        version = self._source.pull({self.model_id: self._model}, self._seen)
        if version == self._seen:
            return None
        self._seen = version
        return as_weights(self._model)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_context=None, _model=None, _side=None, model_id=None)
        state.pop("_store", None)
        return state


class MultiProcessWeightSyncScheme(WeightSyncScheme):
    """Weights pickled into each worker's pipe with its next batch request (no shared memory).

    Each update is serialised once; a worker receives it with its next batch request and applies
    it before collecting. Use it where shared memory is scarce (small ``/dev/shm`` in containers).
    """

    transports: ClassVar[frozenset[str]] = frozenset({"process", "local"})

    def channel(self, models: Mapping[str, torch.nn.Module], num_workers: int) -> WeightChannel:
        from rlcollect.weights.pipe import PipeWeights

        return PipeWeights(models, num_workers)


class RayWeightSyncScheme(WeightSyncScheme):
    """Weights through Ray's object store: one ``ray.put`` per update, pulled by version (the
    default of :class:`~rlcollect.RayCollector`)."""

    transports: ClassVar[frozenset[str]] = frozenset({"ray", "local"})

    def channel(self, models: Mapping[str, torch.nn.Module], num_workers: int) -> WeightChannel:
        from rlcollect.weights.object_store import ObjectStoreWeights

        return ObjectStoreWeights(models, num_workers)


class NoWeightSyncScheme(WeightSyncScheme):
    """No weights move: workers keep the weights they started with, and updates change nothing."""

    transports: ClassVar[frozenset[str]] = frozenset({"process", "ray", "local"})

    def channel(self, models: Mapping[str, torch.nn.Module], num_workers: int) -> WeightChannel:
        return FrozenWeights(num_workers)

    def _init_receiver(self, **kwargs: Any) -> None:
        return

    def _receive(self, timeout: float | None) -> TensorDictBase | None:
        return None
