"""Weights broadcast with ``torch.distributed`` from a learner process to collectors anywhere.

A learner (rank 0, any process on any machine) broadcasts the weights of one model to
``world_size - 1`` collector processes (ranks ``1..world_size-1``) through a private process group
(gloo on CPU, NCCL between GPUs): a user's own default process group (DDP in the learner, say) is
left alone.

How an update travels: the learner announces message ``n`` under a key of a ``TCPStore`` it hosts,
then broadcasts a header ``[version, flag]`` and the weight tensors (sorted by flattened key). Each
collector runs a daemon thread that polls the store for message ``n`` (checking its stop event
between polls, so it never blocks in a collective nobody started), joins that broadcast into a
staging copy, and publishes the copy only once complete and authenticated; ``receive()`` applies
the newest published copy to the collector's model. Every step is bounded by ``timeout``. Who may
speak on the port, and how each side proves it: :mod:`rlcollect.weights.distributed_auth`.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
import warnings
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from tensordict import TensorDictBase

from rlcollect.weights.distributed_auth import (
    fresh_nonce,
    namespace,
    open_store,
    process_group,
    proof,
    resolve_authkey,
    same,
    signature,
)
from rlcollect.weights.distributed_receiver import ReceiverSide
from rlcollect.weights.distributed_wire import (
    ACK_WAIT,
    BACKENDS,
    DATA,
    KEEP,
    POLL_MIN,
    STOP,
    Buffers,
    address,
    is_int,
    key_name,
    left,
    message,
    on_wire,
)
from rlcollect.weights.forms import check_weights
from rlcollect.weights.schemes import Strategy

#: torch.distributed's TCPStore (its type stubs do not export it)
Store = Any

__all__ = ["DistributedWeightSyncScheme"]


class DistributedWeightSyncScheme(ReceiverSide):
    """A learner broadcasts the weights of one model to collectors in other processes or machines.

    The learner is rank 0 (``init_on_sender(model_id=..., model=...)``, then ``send()`` after each
    optimisation step); each collector process is one of ranks ``1..world_size-1``
    (``collector.register_scheme_receiver({"policy": scheme})``, or ``init_on_receiver`` and
    ``connect`` for a bare model), after which each of its batches starts with the newest weights
    received. ``connect()`` joins the group (every rank must join within ``timeout``) and makes the
    initial synchronisation: the learner's weights at that moment are version 0. Each ``send`` is
    one broadcast to every receiver (version 1, 2, ...); a receiver applies the newest version that
    arrived when its ``receive()`` is called and skips those it was too slow to see. ``send`` returns
    once every receiver has the update (a receiver's thread looks for the next one every few ms).

    The group has a fixed size: once a receiver shuts down, the learner cannot broadcast any more
    (its ``send`` raises, and so does the ``receive`` of the other receivers). Use one port (one
    scheme) per model. A not yet initialised scheme pickles, so it can be handed to a spawned
    process. The learner listens on ``init_method``'s address only, and gloo on the loopback
    interface when that address is a loopback one; across machines gloo picks its network
    interface as ``torch.distributed`` does (``GLOO_SOCKET_IFNAME``).

    The processes of a group share one secret, ``authkey``: nothing is applied before the learner
    proves it holds it (an impostor on the port is a ``PermissionError``), nor from a broadcast
    whose bytes do not match their MAC (:mod:`~rlcollect.weights.distributed_auth`).

    Args:
        init_method: ``"tcp://host:port"`` where the learner (rank 0) listens; ``host`` must be
            reachable from every collector.
        world_size: the learner and its receivers: ``1 + number of collector processes`` (>= 2).
        rank: 0 for the learner, ``1..world_size-1`` for each collector process (distinct).
        backend: ``"gloo"`` (CPU tensors, any machine) or ``"nccl"`` (the weights travel between
            GPUs: each process uses its current CUDA device).
        timeout: seconds any step may take (joining the group, one broadcast) before it fails.
        strategy: ``"tensordict"`` or ``"state_dict"`` (see :class:`WeightSyncScheme`).
        authkey: the group's secret (bytes), the same in the learner and every receiver; ``None``:
            ``$RLCOLLECT_AUTHKEY`` if set, else this process's ``multiprocessing`` authkey, which
            the processes it starts inherit and a pickled scheme carries. Processes started
            apart (another machine, another shell) need ``authkey`` or ``$RLCOLLECT_AUTHKEY``.

    Raises:
        ValueError: an argument out of range (the message names it and what is allowed).

    Examples:
        >>> import torch
        >>> scheme = DistributedWeightSyncScheme("tcp://127.0.0.1:29500", world_size=2, rank=0)
        >>> scheme  # picklable until initialised: build it, then give it to the learner process
        DistributedWeightSyncScheme(rank=0 of 2, tcp://127.0.0.1:29500, gloo, not initialized, model_id=None)
        >>> # in the learner process (rank 0):
        >>> policy = torch.nn.Linear(4, 2)
        >>> scheme.init_on_sender(model_id="policy", model=policy)
        >>> scheme.connect()  # doctest: +SKIP
        >>> scheme.send()  # after each optimisation step  # doctest: +SKIP
        >>> scheme.shutdown()  # the receivers' threads stop; their models keep the last weights
        >>> # in a collector process (rank 1), with the same init_method and world_size:
        >>> receiving = DistributedWeightSyncScheme("tcp://127.0.0.1:29500", world_size=2, rank=1)
        >>> collector.register_scheme_receiver({"policy": receiving})  # doctest: +SKIP
    """

    #: a learner feeds collectors in other processes, never a collector's own workers
    transports: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self, init_method: str = "tcp://127.0.0.1:29500", world_size: int = 2, rank: int = 0,
        backend: str = "gloo", timeout: float = 60.0, strategy: Strategy = "tensordict",
        authkey: bytes | None = None,
    ) -> None:
        super().__init__(strategy)
        self._authkey = resolve_authkey(authkey)
        self._host, self._port = address(init_method)
        if not is_int(world_size) or world_size < 2:
            raise ValueError(f"world_size={world_size!r}: the learner and at least one receiver, an int >= 2")
        if not is_int(rank) or not 0 <= rank < world_size:
            raise ValueError(f"rank={rank!r}: an int in [0, world_size={world_size}): 0 for the learner, "
                             f"1..{world_size - 1} for the collector processes")
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout={timeout!r}: a number of seconds > 0")
        self._init_method = init_method
        self._world_size, self._rank = int(world_size), int(rank)
        self._backend, self._timeout = backend, float(timeout)
        self._reset()

    def _reset(self) -> None:
        self._store: Store | None = None
        self._pg: Any = None
        self._device = torch.device("cpu")
        self._reference: TensorDictBase | None = None
        self._order: list[tuple[str, Any]] = []
        self._layout: list[list[Any]] = []
        self._version = 0
        self._next = 0  # the number of the next message (sender)
        self._connected = False
        self._closed = False
        self._broken: str | None = None  # why the sender cannot broadcast any more
        # receiver side
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._staging: Buffers | None = None
        self._published: Buffers | None = None
        self._published_version = 0
        self._error: BaseException | None = None

    # -- properties -----------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """The last version sent (sender) or applied to the model (receiver); 0: the initial weights."""
        return self._version

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def init_method(self) -> str:
        return self._init_method

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def timeout(self) -> float:
        return self._timeout

    # -- sender side ----------------------------------------------------------------------------
    def init_on_sender(
        self, *, model_id: str, context: Any = None, model: torch.nn.Module | None = None,
        num_workers: int = 1, **kwargs: Any,
    ) -> None:
        """Become the learner's side (rank 0) for ``model``; ``num_workers`` is ignored (the
        receivers are the ``world_size - 1`` other ranks).

        Raises:
            ValueError: this scheme's rank is not 0, or ``context`` is given (a collector's own
                workers cannot be fed by a broadcast from a learner).
        """
        if self._side is None and self._rank != 0:
            raise ValueError(f"rank={self._rank}: the sender (learner) is rank 0; ranks "
                             f"1..{self._world_size - 1} are receivers (init_on_receiver)")
        if context is not None:
            raise ValueError(f"{type(self).__name__} is initialised on the sender side by a learner "
                             "(init_on_sender(model_id=..., model=...)), not by a collector: collectors "
                             "receive with register_scheme_receiver")
        super().init_on_sender(model_id=model_id, context=context, model=model, num_workers=num_workers,
                               **kwargs)

    def _standalone(self, model_id: str, model: torch.nn.Module, num_workers: int, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"init_on_sender() got unexpected keyword arguments {sorted(kwargs)}")
        self._describe_model()

    def _send_standalone(self, weights: TensorDictBase, worker_ids: Any) -> None:
        if worker_ids is not None:
            raise ValueError(f"worker_ids={worker_ids!r}: {type(self).__name__} broadcasts to every "
                             "receiver; pass worker_ids=None")
        tensors = self._wire_tensors(weights)  # checked before anything moves
        self._check_usable()
        if not self._connected:
            self._connect_sender()
        self._broadcast(self._version + 1, DATA, tensors)
        self._version += 1

    def _wire_tensors(self, weights: TensorDictBase) -> list[torch.Tensor]:
        assert self._reference is not None
        model_id = self.model_id or "policy"
        check_weights(model_id, weights, self._reference)
        given = {key_name(key) for key in weights.keys(True, True)}
        missing = [name for name, _ in self._order if name not in given]
        if missing:
            raise KeyError(f"weights for {model_id!r} lack {missing}: a broadcast carries every tensor of "
                           "the model")
        tensors = []
        for _, key in self._order:
            tensor, reference = weights.get(key), self._reference.get(key)
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"weights for {model_id!r}: {key_name(key)!r} is a {type(tensor).__name__}, "
                                "not a tensor")
            tensor = tensor.detach().to(device=self._device, dtype=reference.dtype)
            tensors.append(on_wire(tensor.contiguous()))
        return tensors

    def _connect_sender(self) -> None:
        assert self._reference is not None
        tensors = self._wire_tensors(self._reference)
        raw = self._join_store(is_master=True)
        store = dist.PrefixStore(namespace(self._authkey), raw)  # type: ignore[attr-defined]
        try:
            store.set("layout", json.dumps(self._layout))
            nonce, ranks = fresh_nonce(), range(1, self._world_size)
            raw.set("auth/nonce", nonce)
            self._wait_keys(raw, [f"auth/challenge/{rank}" for rank in ranks], "every receiver to connect")
            for rank in ranks:  # prove to each receiver that this learner holds the group's secret
                challenge = raw.get(f"auth/challenge/{rank}").decode()
                raw.set(f"auth/proof/{rank}", proof(self._authkey, "learner", rank, challenge, ""))
            self._wait_keys(store, [f"hello/{rank}" for rank in ranks],
                            "every receiver's answer (a receiver with another authkey cannot give one)")
            refusals = [refusal for rank in ranks if (refusal := self._refusal(store, rank, nonce))]
            if refusals:
                store.set("start", "refused: " + "; ".join(refusals))
                raise ValueError("; ".join(refusals))
            store.set("start", "ok")
            self._pg = self._new_group(store)
            self._store = store
            self._broadcast(0, DATA, tensors)
        except BaseException:
            self._pg = self._store = None
            raise
        self._version, self._connected = 0, True

    def _refusal(self, store: Store, rank: int, nonce: str) -> str | None:
        """What receiver ``rank`` answered, unless ``"ok"`` with a proof of the group's secret."""
        answer, _, mac = store.get(f"hello/{rank}").decode().rpartition("|")
        if not same(mac, proof(self._authkey, "receiver", rank, nonce, answer)):
            return f"rank {rank} did not prove it holds this group's authkey"
        return None if answer == "ok" else answer

    def _broadcast(self, version: int, flag: int, tensors: list[torch.Tensor]) -> None:
        """Announce message ``n`` in the store (unless a receiver left), then broadcast it."""
        assert self._store is not None and self._pg is not None
        n = self._next
        value = f"{version},{flag},{signature(self._authkey, n, version, flag, tensors)}"
        current = self._store.compare_set(message(n), "", value).decode()
        if current != value:  # a receiver claimed this message number when it shut down
            self._broken = left(current)
            raise RuntimeError(self._broken)
        if n >= KEEP:
            self._store.delete_key(message(n - KEEP))
        self._next = n + 1
        header = torch.tensor([version, flag], dtype=torch.int64, device=self._device)
        try:
            works = [self._pg.broadcast(t, 0) for t in [header, *tensors]]
            for work in works:
                work.wait()
        except Exception as exc:
            self._broken = f"the broadcast of version {version} failed: {exc}"
            raise RuntimeError(f"{self._who()}: {self._broken}") from exc

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self._who()} was shut down")
        if self._broken is not None:
            raise RuntimeError(f"{self._who()}: {self._broken}")

    # -- both sides -----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """The learner broadcasts a stop (the receivers' threads end; their models keep the last
        weights) and frees the group; a receiver stops its thread (joined at most a few seconds).
        A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        if self.initialized_on_sender and self._connected and self._broken is None:
            try:
                self._broadcast(self._version, STOP, [])
                assert self._store is not None
                deadline = time.monotonic() + min(self._timeout, ACK_WAIT)
                while self._store.add("stopped", 0) < self._world_size - 1 and time.monotonic() < deadline:
                    time.sleep(POLL_MIN)
            except Exception as exc:
                if self._broken is None or "left the group" not in self._broken:
                    warnings.warn(f"{self._who()}: the stop could not be broadcast: {exc}", RuntimeWarning,
                                  stacklevel=2)
        thread = self._thread
        if thread is not None:
            self._stop.set()
            thread.join(min(self._timeout, ACK_WAIT))
        self._pg = self._store = None
        self._staging = self._published = None

    # -- helpers --------------------------------------------------------------------------------
    def _describe_model(self) -> None:
        if self._backend == "nccl":
            if not torch.cuda.is_available() or not hasattr(dist, "ProcessGroupNCCL"):
                raise RuntimeError("backend='nccl' needs CUDA and a torch built with NCCL; use "
                                   "backend='gloo'")
            self._device = torch.device("cuda", torch.cuda.current_device())
        reference = self.prepare_weights()
        self._reference = reference
        self._order = sorted(((key_name(key), key) for key in reference.keys(True, True)), key=lambda p: p[0])
        self._layout = [[name, list(reference.get(key).shape), str(reference.get(key).dtype)]
                        for name, key in self._order]

    def _join_store(self, is_master: bool) -> Store:
        try:
            return open_store(self._host, self._port, self._world_size if is_master else None, self._timeout)
        except Exception as exc:
            what = "listen at" if is_master else "reach the learner at"
            raise RuntimeError(f"{self._who()}: could not {what} {self._init_method} within "
                               f"timeout={self._timeout}s: {exc}") from exc

    def _wait_keys(self, store: Store, keys: list[str], what: str) -> None:
        try:
            store.wait(keys, datetime.timedelta(seconds=self._timeout))
        except Exception as exc:
            raise RuntimeError(f"{self._who()}: waited timeout={self._timeout}s for {what} at "
                               f"{self._init_method}: {exc}") from exc

    def _new_group(self, store: Store) -> Any:
        """A private process group (the default one, if any, is untouched)."""
        try:
            return process_group(dist.PrefixStore("pg", store), self._rank, self._world_size,  # type: ignore[attr-defined]
                                 self._backend, self._host, self._timeout)
        except Exception as exc:
            raise RuntimeError(f"{self._who()}: could not form the {self._backend} group of "
                               f"{self._world_size} ranks at {self._init_method} within "
                               f"timeout={self._timeout}s: {exc}") from exc

    def _who(self) -> str:
        return f"{type(self).__name__} (rank {self._rank} of {self._world_size}, model {self.model_id!r})"

    def __getstate__(self) -> dict[str, Any]:
        if self._side is not None:
            raise TypeError(f"{type(self).__name__} initialised on the {self._side} side cannot be pickled "
                            "(it holds a process group and threads): pickle it before init_on_sender or "
                            "init_on_receiver")
        state = dict(self.__dict__)
        for name in ("_cond", "_stop", "_thread"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cond, self._stop, self._thread = threading.Condition(), threading.Event(), None

    def __repr__(self) -> str:
        side = self._side or "not initialized"
        return (f"{type(self).__name__}(rank={self._rank} of {self._world_size}, {self._init_method}, "
                f"{self._backend}, {side}, model_id={self.model_id!r})")


