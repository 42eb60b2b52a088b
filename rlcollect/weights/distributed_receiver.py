"""The receiving side of :class:`~rlcollect.weights.distributed.DistributedWeightSyncScheme`: a
collector process's daemon thread that joins the learner's broadcasts into a staging copy and
publishes it once complete; ``receive()`` applies the newest published copy.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from tensordict import TensorDictBase

from rlcollect.weights.distributed_auth import fresh_nonce, namespace, proof, same, signature
from rlcollect.weights.distributed_wire import (
    POLL_MAX,
    POLL_MIN,
    STOP,
    Buffers,
    compare,
    message,
    take,
)
from rlcollect.weights.schemes import WeightSyncScheme

#: torch.distributed's TCPStore (its type stubs do not export it)
Store = Any

__all__ = ["ReceiverSide"]


class ReceiverSide(WeightSyncScheme):
    """A distributed scheme's receiver methods (see the scheme's module docstring)."""

    if TYPE_CHECKING:  # the scheme's own (DistributedWeightSyncScheme)
        _init_method: str
        _authkey: bytes
        _rank: int
        _world_size: int
        _timeout: float
        _device: torch.device
        _reference: TensorDictBase | None
        _order: list[tuple[str, Any]]
        _layout: list[list[Any]]
        _version: int
        _connected: bool
        _closed: bool
        _cond: threading.Condition
        _stop: threading.Event
        _thread: threading.Thread | None
        _staging: Buffers | None
        _published: Buffers | None
        _published_version: int
        _error: BaseException | None
        _store: Store | None
        _pg: Any

        def _check_usable(self) -> None: ...
        def _connect_sender(self) -> None: ...
        def _describe_model(self) -> None: ...
        def _join_store(self, is_master: bool) -> Store: ...
        def _wait_keys(self, store: Store, keys: list[str], what: str) -> None: ...
        def _new_group(self, store: Store) -> Any: ...
        def _who(self) -> str: ...

    # -- receiver side --------------------------------------------------------------------------
    def init_on_receiver(
        self, *, model_id: str, context: Any = None, model: torch.nn.Module | None = None,
        worker_idx: int | None = None, **kwargs: Any,
    ) -> None:
        """Become a receiver (rank >= 1): weights received are applied to ``model`` (default: the
        ``context`` collector's module of ``model_id``).

        Raises:
            ValueError: this scheme's rank is 0 (the learner's).
            RuntimeError: the scheme is already the sender.
        """
        if self._side is None and self._rank == 0:
            raise ValueError(f"rank=0 is the sender (learner); a receiver needs a rank in "
                             f"1..{self._world_size - 1}")
        super().init_on_receiver(model_id=model_id, context=context, model=model, worker_idx=worker_idx,
                                 **kwargs)

    def _init_receiver(self, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"init_on_receiver() got unexpected keyword arguments {sorted(kwargs)}")
        self._describe_model()

    def connect(self, *, worker_idx: int | None = None) -> bool:
        """Join the group and make the initial synchronisation (version 0): the learner broadcasts
        its weights, a receiver applies them and starts its receiving thread. Blocks until every
        rank has joined, at most ``timeout`` seconds per step; a second call does nothing.
        Returns whether weights were applied (a receiver's first call).

        Raises:
            RuntimeError: the scheme is not initialised, was shut down, or the group could not be
                joined in time (the cause is chained).
            ValueError: the learner's model and a receiver's differ (keys, shapes, dtypes).
            PermissionError: the process at ``init_method`` did not prove it holds the group's
                ``authkey`` (nothing it sent was applied).
        """
        if worker_idx is not None:
            self.worker_idx = worker_idx
        if self.initialized_on_sender:
            self._check_usable()
            if not self._connected:
                self._connect_sender()
            return False
        if self.initialized_on_receiver:
            if self._closed:
                raise RuntimeError(f"{self._who()} was shut down")
            if self._connected:
                return False
            self._connect_receiver()
            return True
        else:
            raise RuntimeError(f"{type(self).__name__}.connect() needs init_on_sender() or "
                               "init_on_receiver() first")

    def _connect_receiver(self) -> None:
        assert self._reference is not None
        raw = self._join_store(is_master=False)
        store = dist.PrefixStore(namespace(self._authkey), raw)  # type: ignore[attr-defined]
        try:
            if store.add(f"joined/{self._rank}", 1) > 1:
                raise ValueError(f"rank={self._rank}: another receiver already joined the group at "
                                 f"{self._init_method} with this rank; give each collector process its own")
            nonce = self._authenticate_learner(raw)
            self._wait_keys(store, ["layout"], "the learner's model description")
            refusal = compare(json.loads(store.get("layout").decode()), self._layout, self._rank)
            answer = refusal or "ok"
            mac = proof(self._authkey, "receiver", self._rank, nonce, answer)
            store.set(f"hello/{self._rank}", f"{answer}|{mac}")
            if refusal:
                raise ValueError(refusal)
            self._wait_keys(store, ["start"], "the learner to start")
            start = store.get("start").decode()
            if start != "ok":
                raise RuntimeError(f"the learner did not start the group: {start}")
            pg = self._new_group(store)
            staging = Buffers(self._reference, self._order, self._device)
            deadline = time.monotonic() + self._timeout
            while not store.check([message(0)]):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self._who()}: the learner's initial weights did not come within "
                                       f"timeout={self._timeout}s")
                time.sleep(POLL_MIN)
            value = store.get(message(0)).decode()
            version, flag = take(pg, value, staging, self._device)
            if not self._authentic(value, 0, version, flag, staging.tensors):
                raise PermissionError(f"{self._who()}: the initial weights from {self._init_method} do not "
                                      "match their signature (altered on the way); none was applied")
        except BaseException:
            del store, raw
            raise
        self.apply_weights(staging.td)
        self._store, self._pg = store, pg
        self._staging, self._published = staging, None  # applied: free to receive the next one
        self._version = self._published_version = 0
        self._connected = True
        self.synchronized_on_receiver = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(store, pg), daemon=True,
                                        name=f"DistributedWeightSyncScheme-rank{self._rank}")
        self._thread.start()

    def _authenticate_learner(self, raw: Store) -> str:
        """Challenge the process at ``init_method`` to prove it holds the group's secret; returns
        the learner's own nonce, which this receiver's answer must prove it holds the secret too."""
        nonce, key = fresh_nonce(), f"auth/challenge/{self._rank}"
        if raw.compare_set(key, "", nonce).decode() != nonce:
            raise PermissionError(f"{self._who()}: rank {self._rank}'s challenge at {self._init_method} was "
                                  "written by another process first (a second receiver of this rank, or a "
                                  "stranger on the learner's port)")
        self._wait_keys(raw, [f"auth/proof/{self._rank}", "auth/nonce"],
                        "the learner's proof of the authkey")
        if not same(raw.get(f"auth/proof/{self._rank}").decode(),
                    proof(self._authkey, "learner", self._rank, nonce, "")):
            raise PermissionError(f"{self._who()}: the process listening at {self._init_method} did not "
                                  "prove it holds this group's authkey (an impostor on that port, or a "
                                  "learner given another authkey or $RLCOLLECT_AUTHKEY); nothing it sent "
                                  "was applied")
        return str(raw.get("auth/nonce").decode())

    def _authentic(self, value: str, n: int, version: int, flag: int, tensors: list[torch.Tensor]) -> bool:
        """Whether message ``n`` (its store ``value`` and the tensors received) is the learner's."""
        mac = value.split(",")[2] if value.count(",") == 2 else ""
        return same(mac, signature(self._authkey, n, version, flag, tensors))

    def _run(self, store: Store, pg: Any) -> None:
        """The receiving thread: message after message, until the learner stops or we do."""
        n, delay, claim = 1, POLL_MIN, f"left {self._rank}"
        try:
            if self._device.type == "cuda":
                torch.cuda.set_device(self._device)
            while True:
                if self._stop.is_set():  # claim the next message number, unless the learner took it
                    value = store.compare_set(message(n), "", claim).decode()
                    if value == claim:
                        return
                elif store.check([message(n)]):
                    value = store.get(message(n)).decode()
                else:
                    self._stop.wait(delay)
                    delay = min(2 * delay, POLL_MAX)
                    continue
                delay = POLL_MIN
                assert self._staging is not None
                version, flag = take(pg, value, self._staging, self._device)
                n += 1
                received = self._staging.tensors if flag != STOP else []
                if not self._authentic(value, n - 1, version, flag, received):
                    warnings.warn(f"{self._who()}: message {n - 1} (version {version}) from "
                                  f"{self._init_method} does not match its signature (altered on the way): "
                                  "dropped, never applied", RuntimeWarning, stacklevel=1)
                    continue
                if flag == STOP:
                    store.add("stopped", 1)
                    return
                with self._cond:  # publish the complete copy; the old published one is the next staging
                    filled = self._staging
                    self._staging = self._published or Buffers(filled.td, self._order, self._device)
                    self._published, self._published_version = filled, version
                    self._cond.notify_all()
        except BaseException as exc:
            with self._cond:
                self._error = exc
        finally:
            with self._cond:
                self._cond.notify_all()

    def _receive(self, timeout: float | None) -> TensorDictBase | None:
        if self._closed:
            return None
        if not self._connected:
            raise RuntimeError(f"{type(self).__name__}.receive() needs connect() first")
        deadline = None if not timeout or timeout <= 0 else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._published is not None and self._published_version > self._version:
                    self.apply_weights(self._published.td)  # complete, even if an error followed it
                    self._version = self._published_version
                    return self._published.td.clone()
                if self._error is not None:
                    raise RuntimeError(f"{self._who()}: receiving weights from the learner at "
                                       f"{self._init_method} failed: {self._error}") from self._error
                thread = self._thread
                if deadline is None or thread is None or not thread.is_alive():
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    @property
    def receiving(self) -> bool:
        """Whether a receiver's thread is still receiving (not stopped by the learner, an error, or
        :meth:`shutdown`)."""
        return self._thread is not None and self._thread.is_alive()

