"""The weights a collector sends to its policy copies and receives from elsewhere: its part
:class:`Weights` (``collector._weight_part``), behind the reference's methods on
:class:`~rlcollect.BaseCollector` (``update_policy_weights_``, ``receive_weights``,
``register_scheme_receiver``, ``weight_updater``, ...): every form of an update, the legacy
updater, and receiver schemes.

The part holds the senders' schemes, the legacy updater and the receivers; it asks its collector
only for what the collector runs (:class:`WeightHost`), through a weak reference.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping
from typing import Any, Protocol

import torch

from rlcollect.common.callers import outside_stacklevel
from rlcollect.weights.forms import (
    apply_weights,
    as_weights,
    check_model_ids,
    per_worker_weights,
    weight_update_forms,
    worker_indices,
)
from rlcollect.weights.schemes import NoWeightSyncScheme, WeightSyncScheme
from rlcollect.weights.updater import WeightUpdaterBase

__all__ = ["WeightHost", "Weights"]


class WeightHost(Protocol):
    """What a collector offers its :class:`Weights`: its workers, its models, and how weights
    reach what it runs (a collector subclass overrides these)."""

    num_workers: int
    _worker_idx: int | None

    def update_policy_weights_(self, policy_or_weights: Any = None, **kwargs: Any) -> None: ...

    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None: ...

    def _apply_received(self, forms: dict[str, Any]) -> None: ...

    def _weights_sent(self) -> None: ...

    def _model_ids(self) -> list[str]: ...

    def receiver_model(self, model_id: str) -> torch.nn.Module: ...


class Weights:
    """A collector's weights: the schemes that send them (:attr:`senders`, set by the collector
    once its models are known), the legacy :attr:`updater`, and the schemes that receive them
    (:attr:`receivers`: rlcollect's, polled before each batch; :attr:`driven`: another library's,
    whose sender calls the collector's ``_receive_weights_scheme``)."""

    def __init__(self, collector: WeightHost) -> None:
        self._collector = weakref.ref(collector)
        self.senders: dict[str, WeightSyncScheme] | None = None
        self.updater: WeightUpdaterBase | None = None
        self.receivers: dict[str, WeightSyncScheme] | None = None
        self.driven: dict[str, Any] | None = None
        self._warned_weightless = False

    @property
    def collector(self) -> WeightHost:
        collector = self._collector()
        if collector is None:
            raise ReferenceError("the collector these weights belong to was dropped")
        return collector

    # -- sending -----------------------------------------------------------------------------
    def set_updater(self, value: Any) -> None:
        """Take a legacy updater (a class: built with its default constructor), registered with
        the collector."""
        if value is not None:
            if isinstance(value, type):
                value = value()
            if not callable(value):
                raise TypeError(f"weight_updater must be callable (a WeightUpdaterBase), got "
                                f"{type(value).__name__}")
            register = getattr(value, "register_collector", None)
            if register is not None:
                register(self.collector)
        self.updater = value

    def init_updater(self, *args: Any, **kwargs: Any) -> None:
        """Call the legacy updater's ``init``, if it has one."""
        init = getattr(self.updater, "init", None)
        if init is not None:
            init(*args, **kwargs)

    def update(self, policy_or_weights: Any = None, *, weights: Any = None, policy: Any = None,
               worker_ids: Any = None, model_id: str | None = None,
               weights_dict: Mapping[str, Any] | None = None, policy_weights: Any = None,
               **updater_kwargs: Any) -> None:
        """Bring the collector's weights up to date and bump their version: from the policy given
        at construction (no argument), or from a module, a TensorDict or a dict of weights
        (positionally, ``weights=`` or ``policy=``; ``policy_weights=`` is deprecated), for
        ``model_id`` (default ``"policy"``), several models at once (``weights_dict``), some workers
        (``worker_ids``: ints, or devices), or each worker its own (``{worker: weights}``). They
        travel through :attr:`weight_sync_schemes`, or the legacy ``weight_updater`` (which gets
        any other keyword).

        Raises:
            TypeError: another keyword without a legacy ``weight_updater``.
            ValueError: forms that exclude each other, ``model_id`` or ``weights_dict`` with a
                legacy ``weight_updater``, or a worker or device this collector lacks.
            KeyError: an unknown model id (the known ones are listed).

        Examples:
            >>> import torch
            >>> from rlcollect import Collector
            >>> policy = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Softmax(-1))
            >>> greedy = lambda obs: policy(obs).argmax(-1)
            >>> collector = Collector("CartPole-v1", greedy, frames_per_batch=4, models={"policy": policy})
            >>> with collector:
            ...     collector.update_policy_weights_(policy)
            ...     collector.policy_version
            1
        """
        if policy_weights is not None:
            warnings.warn("update_policy_weights_(policy_weights=...) is deprecated: pass the weights "
                          "positionally or as policy_or_weights=", DeprecationWarning,
                          stacklevel=outside_stacklevel())
            if policy_or_weights is not None:
                raise ValueError("give the weights once: got policy_or_weights and policy_weights together")
            policy_or_weights = policy_weights
        by_worker = per_worker_weights(policy_or_weights)
        if by_worker is not None:
            self._update_each_worker(by_worker, worker_ids, model_id=model_id, **updater_kwargs)
            return
        forms = weight_update_forms(
            policy_or_weights, weights=weights, policy=policy, model_id=model_id,
            weights_dict=weights_dict,
        )
        collector = self.collector
        if self.updater is not None:
            if weights_dict is not None or model_id is not None:
                raise ValueError("model_id and weights_dict are not supported with the legacy "
                                 "weight_updater: use weight_sync_schemes for several models")
            self.updater(policy_or_weights=forms["policy"], worker_ids=worker_ids, **updater_kwargs)
            collector._weights_sent()
            return
        if updater_kwargs:
            raise TypeError(f"update_policy_weights_() got unexpected keyword argument(s) "
                            f"{sorted(updater_kwargs)}: only a legacy weight_updater takes other keywords")
        if not self._nothing_to_update(forms):
            collector._update_weights(forms, self.worker_ids(worker_ids))

    def _nothing_to_update(self, forms: dict[str, Any]) -> bool:
        """Whether ``forms`` asks for an update of a policy that has no weights (a function, a
        module without parameters, random actions): nothing to send, as in TorchRL; said once."""
        if forms != {"policy": None} or "policy" in self.collector._model_ids():
            return False
        if not self._warned_weightless:
            self._warned_weightless = True
            warnings.warn("update_policy_weights_(): the policy has no weights (no parameter or buffer), "
                          "so there is nothing to send; the call does nothing", UserWarning,
                          stacklevel=outside_stacklevel())
        return True

    def _update_each_worker(self, by_worker: dict[int, Any], worker_ids: Any, **kwargs: Any) -> None:
        """``update_policy_weights_({worker: weights, ...})``: one update per worker, in order;
        every worker index and weight form is checked before the first is sent (weights that do
        not fit the model are refused at their own update, the workers before it updated)."""
        if worker_ids is not None:
            raise ValueError(f"give the workers once: {{worker: weights}} names workers {sorted(by_worker)}, "
                             f"and worker_ids={worker_ids!r} was given too")
        self.worker_ids(list(by_worker))  # each in range
        for weights in by_worker.values():
            weight_update_forms(weights, model_id=kwargs.get("model_id"))
        for worker, weights in by_worker.items():
            self.collector.update_policy_weights_(weights, worker_ids=[worker], **kwargs)

    def worker_ids(self, worker_ids: Any) -> list[int] | None:
        """``worker_ids`` as a sorted list of this collector's worker indices (:func:`worker_indices`)."""
        options = getattr(self.collector, "options", None)
        return worker_indices(worker_ids, self.collector.num_workers,
                              options.policy_device if options is not None else None)

    def update_in_process(self, forms: dict[str, Any], user_policy: Any) -> None:
        """The update of a collector whose models run in this process: every scheme applies in
        place, except ``NoWeightSyncScheme`` (nothing changes); ``None`` for the policy pulls from
        ``user_policy``, the policy given at construction (nothing to copy when that is the module
        that runs)."""
        collector = self.collector
        modules = {model_id: collector.receiver_model(model_id) for model_id in forms}  # KeyError first
        schemes = self.senders or {}
        moving = {m: s for m, s in forms.items() if not isinstance(schemes.get(m), NoWeightSyncScheme)}
        if not moving:
            return
        if "policy" in moving and moving["policy"] is None:
            moving["policy"] = user_policy
        collector._apply_received({m: None if s is None or s is modules[m] else schemes[m].prepare_weights(s)
                                   for m, s in moving.items()})

    def apply_in_process(self, forms: dict[str, Any]) -> None:
        """Copy ``{model_id: weights}`` into the collector's modules (``None``: applied already)."""
        for model_id, source in forms.items():
            module = self.collector.receiver_model(model_id)
            if source is not None and source is not module:
                apply_weights(module, as_weights(source), model_id)

    def apply_to_policy_attribute(self, forms: dict[str, Any]) -> None:
        """Copy the ``"policy"`` weights into the module the collector holds as ``policy`` (a
        collector subclass with the reference's abstract methods only).

        Raises:
            NotImplementedError: another model id, or no such module.
        """
        collector = self.collector
        policy = vars(collector).get("policy")
        for model_id, weights in forms.items():
            if model_id != "policy" or not isinstance(policy, torch.nn.Module):
                raise NotImplementedError(
                    f"{type(collector).__name__} cannot take weights for {model_id!r}: override "
                    "_update_weights, or hold the policy module as self.policy")
            if weights is not None:
                apply_weights(policy, as_weights(weights))

    # -- receiving ---------------------------------------------------------------------------
    def receive(self, policy_or_weights: Any = None, *, weights: Any = None, policy: Any = None) -> None:
        """Apply to the policy the weights given (a module, a TensorDict or a dict), or with none the
        newest of every receiver scheme (:meth:`register_scheme_receiver`; polled before each batch
        too). ``ValueError`` for two forms, or weights given while receiver schemes are registered."""
        source = weight_update_forms(policy_or_weights, weights=weights, policy=policy)["policy"]
        if self.receivers:
            if source is not None:
                raise ValueError("receive_weights() takes no weights when receiver schemes are registered: "
                                 "they know where the weights come from")
            self.poll()
        elif source is not None:
            self.collector._apply_received({"policy": source})

    def register(self, schemes: Mapping[str, Any], synchronize_weights: bool) -> None:
        """Receive weights through ``weight_recv_schemes`` ``{model_id: scheme}`` from a sender
        elsewhere: each batch starts with the newest received, forwarded to this collector's
        workers (TorchRL's schemes: their sender calls :meth:`_receive_weights_scheme`).

        Raises:
            TypeError: not a dict of ``{model_id: WeightSyncScheme}``.
            KeyError: a model id this collector does not have (the known ones are listed).
            RuntimeError: a scheme that feeds a sender, or another collector or model.
        """
        if not isinstance(schemes, Mapping):
            raise TypeError(f"register_scheme_receiver takes a dict {{model_id: WeightSyncScheme}} (e.g. "
                            f"{{'policy': scheme}}), got {type(schemes).__name__}")
        collector = self.collector
        schemes = self._receivable(schemes)
        driven = {m: s for m, s in schemes.items() if not isinstance(s, WeightSyncScheme)}
        for model_id, scheme in driven.items():
            if not all(callable(getattr(scheme, name, None))
                       for name in ("init_on_receiver", "connect", "receive")):
                raise TypeError(f"weight_recv_schemes[{model_id!r}] must be a WeightSyncScheme (or a scheme "
                                "with the reference's init_on_receiver, connect and receive, such as "
                                f"TorchRL's), got {type(scheme).__name__} {scheme!r:.80}")
        check_model_ids(schemes, collector._model_ids())
        self._register_driven(driven, synchronize_weights)
        receivers = dict(self.receivers or {})
        for model_id, scheme in schemes.items():
            if model_id in driven:
                continue
            if not scheme.initialized_on_receiver:
                scheme.init_on_receiver(model_id=model_id, context=collector,
                                        worker_idx=collector._worker_idx)
            elif scheme.model_id != model_id or scheme.context not in (None, collector):
                raise RuntimeError(
                    f"this {type(scheme).__name__} already feeds model {scheme.model_id!r} of another "
                    "collector: a receiver scheme serves one model of one collector (ask the sender for "
                    "one receiver per collector: sender.receiver(worker_idx))")
            receivers[model_id] = scheme
        self.receivers = receivers
        if synchronize_weights:
            synchronized = {model_id: None for model_id, scheme in receivers.items()
                            if not scheme.synchronized_on_receiver
                            and scheme.connect(worker_idx=collector._worker_idx)}
            if synchronized:  # the sender's weights, applied to this collector's model: to the workers
                collector._apply_received(synchronized)

    def _receivable(self, schemes: Mapping[str, Any]) -> dict[str, Any]:
        """``schemes`` but the policy's when the policy has no weights: nothing it could receive
        changes it, so its updates do nothing, as in TorchRL; said once."""
        if "policy" not in schemes or "policy" in self.collector._model_ids():
            return dict(schemes)
        if not self._warned_weightless:
            self._warned_weightless = True
            warnings.warn("weight_recv_schemes['policy']: the policy has no weights (no parameter or "
                          "buffer), so the weights sent to it change nothing; its updates do nothing",
                          UserWarning, stacklevel=outside_stacklevel())
        return {model_id: scheme for model_id, scheme in schemes.items() if model_id != "policy"}

    def _register_driven(self, driven: Mapping[str, Any], synchronize_weights: bool) -> None:
        """Initialise and connect schemes of the reference's API that are not rlcollect's (their
        sender drives them: each applies what it receives through ``update_policy_weights_``; never
        polled per batch), as the reference's ``register_scheme_receiver`` does."""
        worker_idx = self.collector._worker_idx
        for model_id, scheme in driven.items():
            if not scheme.initialized_on_receiver:
                scheme.init_on_receiver(model_id=model_id, context=self.collector, worker_idx=worker_idx)
        self.driven = {**(self.driven or {}), **driven}
        if synchronize_weights:
            for scheme in driven.values():
                if not scheme.synchronized_on_receiver:
                    scheme.connect(worker_idx=worker_idx)

    def shutdown(self) -> None:
        """Stop the receiver schemes (threads, process groups); every shutdown does this."""
        receivers, self.receivers = self.receivers or {}, None
        driven, self.driven = self.driven or {}, None
        for scheme in [*receivers.values(), *driven.values()]:
            shutdown = getattr(scheme, "shutdown", None)
            if shutdown is not None:
                shutdown()

    def receive_all(self) -> None:
        """Receive through every receiver scheme: the driven ones (their sender asked for it) and
        this collector's own (:meth:`poll`).

        Raises:
            RuntimeError: no receiver scheme is registered (as in the reference).
        """
        if not self.receivers and not self.driven:
            raise RuntimeError("No receiver schemes registered: register_scheme_receiver() first")
        for scheme in (self.driven or {}).values():
            scheme.receive()  # applies and cascades through update_policy_weights_
        self.poll()

    def poll(self) -> None:
        """Take the newest weights of this collector's own receiver schemes (before each batch);
        forward those that changed."""
        if not self.receivers:
            return
        received = {model_id: None for model_id, scheme in self.receivers.items()
                    if scheme.receive() is not None}  # applied to the receiver model: pull from it
        if received:
            self.collector._apply_received(received)
