"""The weights a collector sends to its policy copies and receives from elsewhere: every form of
``update_policy_weights_``, the legacy updater, and receiver schemes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlcollect.common.callers import outside_stacklevel
from rlcollect.weights.forms import (
    apply_weights,
    as_weights,
    check_model_ids,
    per_worker_weights,
    weight_update_forms,
)
from rlcollect.weights.schemes import NoWeightSyncScheme, WeightSyncScheme
from rlcollect.weights.updater import WeightUpdaterBase

__all__ = ["WeightApi"]


class WeightApi:
    """The weight methods every collector has (a part of :class:`~rlcollect.BaseCollector`)."""

    _worker_idx: int | None = None

    # -- weights: sending ---------------------------------------------------------------------
    _weight_sync_schemes: dict[str, WeightSyncScheme] | None = None
    _weight_updater: WeightUpdaterBase | None = None

    @property
    def weight_sync_schemes(self) -> dict[str, WeightSyncScheme]:
        """``{model_id: scheme}`` moving each model's weights to the workers (defaults included)."""
        return dict(self._weight_sync_schemes or {})

    @property
    def weight_updater(self) -> WeightUpdaterBase | None:
        """The legacy updater called by ``update_policy_weights_`` instead of the schemes."""
        return self._weight_updater

    @weight_updater.setter
    def weight_updater(self, value: Any) -> None:
        if value is not None:
            if isinstance(value, type):  # a class: built with its default constructor
                value = value()
            if not callable(value):
                raise TypeError(f"weight_updater must be callable (a WeightUpdaterBase), got "
                                f"{type(value).__name__}")
            register = getattr(value, "register_collector", None)
            if register is not None:
                register(self)
        self._weight_updater = value

    @property
    def _legacy_weight_updater(self) -> bool:
        """Whether updates go through a legacy ``weight_updater`` (the reference's name)."""
        return self._weight_updater is not None

    def init_updater(self, *args: Any, **kwargs: Any) -> None:
        """Pass ``args`` and ``kwargs`` to the legacy weight updater's ``init`` (no-op without one)."""
        init = getattr(self._weight_updater, "init", None)
        if init is not None:
            init(*args, **kwargs)

    def update_policy_weights_(
        self,
        policy_or_weights: Any = None,
        *,
        weights: Any = None,
        policy: Any = None,
        worker_ids: int | torch.device | Sequence[int | torch.device] | None = None,
        model_id: str | None = None,
        weights_dict: Mapping[str, Any] | None = None,
        policy_weights: Any = None,
        **updater_kwargs: Any,
    ) -> None:
        """Bring the collector's weights up to date and bump their version.

        Accepts the reference API's forms: no argument (pull from the policy given at
        construction), a module, a TensorDict or a dict of weights (positionally or as
        ``policy_or_weights=``, or as ``weights=`` / ``policy=``), ``model_id=`` for another model
        than ``"policy"``, ``weights_dict={model_id: weights, ...}`` for several models at once
        (atomically), and ``worker_ids=`` (ints, or devices: the workers whose policy runs there)
        to update only some workers. ``policy_weights=`` is the deprecated name of
        ``policy_or_weights``. ``{worker index: weights, ...}`` gives each of those workers its own
        weights (workers that build distinct policies, from a list of ``policy_factory``). The
        weights travel through :attr:`weight_sync_schemes`, or through the legacy
        ``weight_updater`` when one was given, which also gets any other keyword.

        Raises:
            TypeError: a keyword of none of these forms without a legacy ``weight_updater``.
            ValueError: forms that exclude each other were combined, ``model_id`` or
                ``weights_dict`` with a legacy ``weight_updater``, or a worker id or device this
                collector does not have.
            KeyError: an unknown model id (the known ones are listed).
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
        if self._weight_updater is not None:
            if weights_dict is not None or model_id is not None:
                raise ValueError("model_id and weights_dict are not supported with the legacy "
                                 "weight_updater: use weight_sync_schemes for several models")
            self._weight_updater(policy_or_weights=forms["policy"], worker_ids=worker_ids, **updater_kwargs)
            self._weights_sent()
            return
        if updater_kwargs:
            raise TypeError(f"update_policy_weights_() got unexpected keyword argument(s) "
                            f"{sorted(updater_kwargs)}: only a legacy weight_updater takes other keywords")
        if not self._nothing_to_update(forms):
            self._update_weights(forms, self._worker_ids(worker_ids))

    _warned_weightless = False

    def _nothing_to_update(self, forms: dict[str, Any]) -> bool:
        """Whether ``forms`` asks for an update of a policy that has no weights (a function, a
        module without parameters, random actions): nothing to send, as in TorchRL; said once."""
        if forms != {"policy": None} or "policy" in self._model_ids():
            return False
        if not self._warned_weightless:
            self._warned_weightless = True
            warnings.warn("update_policy_weights_(): the policy has no weights (no parameter or buffer), "
                          "so there is nothing to send; the call does nothing", UserWarning,
                          stacklevel=outside_stacklevel())
        return True

    def _receivable(self, schemes: Mapping[str, Any]) -> dict[str, Any]:
        """``schemes`` but the policy's when the policy has no weights: nothing it could receive
        changes it, so its updates do nothing, as in TorchRL; said once."""
        if "policy" not in schemes or "policy" in self._model_ids():
            return dict(schemes)
        if not self._warned_weightless:
            self._warned_weightless = True
            warnings.warn("weight_recv_schemes['policy']: the policy has no weights (no parameter or "
                          "buffer), so the weights sent to it change nothing; its updates do nothing",
                          UserWarning, stacklevel=outside_stacklevel())
        return {model_id: scheme for model_id, scheme in schemes.items() if model_id != "policy"}

    def _weights_sent(self) -> None:
        """Weights went to the policy copies (a collector that warns about unsent edits notes it)."""

    def _update_each_worker(self, by_worker: dict[int, Any], worker_ids: Any, **kwargs: Any) -> None:
        """``update_policy_weights_({worker: weights, ...})``: one update per worker, in order;
        every worker index and weight form is checked before the first is sent (weights that do
        not fit the model are refused at their own update, the workers before it updated)."""
        if worker_ids is not None:
            raise ValueError(f"give the workers once: {{worker: weights}} names workers {sorted(by_worker)}, "
                             f"and worker_ids={worker_ids!r} was given too")
        self._worker_ids(list(by_worker))  # each in range
        for weights in by_worker.values():
            weight_update_forms(weights, model_id=kwargs.get("model_id"))
        for worker, weights in by_worker.items():
            self.update_policy_weights_(weights, worker_ids=[worker], **kwargs)

    num_workers: int = 1

    def _worker_ids(self, worker_ids: Any) -> list[int] | None:
        """``worker_ids`` as a sorted list of ints (devices: the workers whose policy runs there)."""
        if worker_ids is None:
            return None
        if isinstance(worker_ids, np.ndarray) and worker_ids.ndim <= 1 and worker_ids.dtype.kind in "iu":
            worker_ids = worker_ids.tolist()
        items = list(worker_ids) if isinstance(worker_ids, (list, tuple, range)) else [worker_ids]
        options = getattr(self, "options", None)
        policy_device = options.policy_device if options is not None else None
        ids: set[int] = set()
        for item in items:
            if isinstance(item, (torch.device, str)):
                try:
                    device = torch.device(item)
                except (RuntimeError, ValueError):
                    raise ValueError(f"worker_ids={worker_ids!r}: {item!r} is neither a worker index nor a "
                                     "device") from None
                if device != torch.device(policy_device or "cpu"):
                    raise ValueError(f"worker_ids={item!r}: the workers' policy runs on "
                                     f"{policy_device or 'cpu'}, not {device}")
                ids.update(range(self.num_workers))
            elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                if not 0 <= item < self.num_workers:
                    raise ValueError(f"worker_ids={worker_ids!r}: worker {int(item)} is out of range for "
                                     f"num_workers={self.num_workers}")
                ids.add(int(item))
            else:
                raise TypeError(f"worker_ids must be ints or devices, got {item!r} ({type(item).__name__})")
        return sorted(ids)

    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        """Apply ``{model_id: weights or None}`` to the given workers (all if ``None``).

        rlcollect's collectors send the weights to their workers; this default (for a subclass
        that implements only the reference's abstract methods) copies the ``"policy"`` weights into
        the module it holds as ``self.policy``.

        Raises:
            NotImplementedError: another model id, or no ``self.policy`` module to update.
        """
        policy = self.__dict__.get("policy")
        for model_id, weights in forms.items():
            if model_id != "policy" or not isinstance(policy, torch.nn.Module):
                raise NotImplementedError(
                    f"{type(self).__name__} cannot take weights for {model_id!r}: override _update_weights, "
                    "or hold the policy module as self.policy")
            if weights is not None:
                apply_weights(policy, as_weights(weights))

    def _update_in_process(self, forms: dict[str, Any], user_policy: Any) -> None:
        """``_update_weights`` of a collector whose models run in this process: every scheme
        applies in place, except ``NoWeightSyncScheme`` (nothing changes); ``None`` for the policy
        pulls from ``user_policy``, the policy given at construction (nothing to copy when that is
        the module that runs)."""
        modules = {model_id: self.receiver_model(model_id) for model_id in forms}  # KeyError first
        schemes = self.weight_sync_schemes
        moving = {m: s for m, s in forms.items() if not isinstance(schemes.get(m), NoWeightSyncScheme)}
        if not moving:
            return
        if "policy" in moving and moving["policy"] is None:
            moving["policy"] = user_policy
        self._apply_received({m: None if s is None or s is modules[m] else schemes[m].prepare_weights(s)
                              for m, s in moving.items()})

    def _apply_in_process(self, forms: dict[str, Any]) -> None:
        """Copy ``{model_id: weights}`` into the modules (``None``: applied already)."""
        for model_id, source in forms.items():
            module = self.receiver_model(model_id)
            if source is not None and source is not module:
                apply_weights(module, as_weights(source), model_id)

    # -- weights: receiving ------------------------------------------------------------------
    _receiver_schemes: dict[str, WeightSyncScheme] | None = None

    def receive_weights(
        self, policy_or_weights: Any = None, *, weights: Any = None, policy: Any = None
    ) -> None:
        """Apply weights received from upstream to what this collector runs.

        With no argument, take the newest weights of every receiver scheme registered with
        :meth:`register_scheme_receiver` (a collector polls them itself before each batch).
        With weights (a module, a TensorDict or a dict; positionally, ``weights=`` or
        ``policy=``), apply them to the policy.

        Raises:
            ValueError: two forms together, or weights given while receiver schemes are
                registered (the schemes know where the weights come from).
        """
        source = weight_update_forms(policy_or_weights, weights=weights, policy=policy)["policy"]
        if self._receiver_schemes:
            if source is not None:
                raise ValueError("receive_weights() takes no weights when receiver schemes are registered: "
                                 "they know where the weights come from")
            self._poll_receivers()
        elif source is not None:
            self._apply_received({"policy": source})

    def register_scheme_receiver(
        self, weight_recv_schemes: Mapping[str, WeightSyncScheme], *, synchronize_weights: bool = True
    ) -> None:
        """Receive weights through ``weight_recv_schemes`` ``{model_id: scheme}`` from a sender
        elsewhere (a learner process, a parent collector); each batch then starts with the newest
        weights received, forwarded to this collector's own workers.

        Raises:
            TypeError: not a dict of ``{model_id: WeightSyncScheme}``.
            KeyError: a model id this collector does not have (the known ones are listed).
            RuntimeError: a scheme already initialised on the sender side, or as the receiver of
                another collector or model (each receiver feeds one model of one collector).
        """
        if not isinstance(weight_recv_schemes, Mapping):
            raise TypeError(f"register_scheme_receiver takes a dict {{model_id: WeightSyncScheme}} (e.g. "
                            f"{{'policy': scheme}}), got {type(weight_recv_schemes).__name__}")
        weight_recv_schemes = self._receivable(weight_recv_schemes)
        driven = {m: s for m, s in weight_recv_schemes.items() if not isinstance(s, WeightSyncScheme)}
        for model_id, scheme in driven.items():
            if not all(callable(getattr(scheme, name, None))
                       for name in ("init_on_receiver", "connect", "receive")):
                raise TypeError(f"weight_recv_schemes[{model_id!r}] must be a WeightSyncScheme (or a scheme "
                                "with the reference's init_on_receiver, connect and receive, such as "
                                f"TorchRL's), got {type(scheme).__name__} {scheme!r:.80}")
        check_model_ids(weight_recv_schemes, self._model_ids())
        self._register_driven(driven, synchronize_weights)
        receivers = dict(self._receiver_schemes or {})
        for model_id, scheme in weight_recv_schemes.items():
            if model_id in driven:
                continue
            if not scheme.initialized_on_receiver:
                scheme.init_on_receiver(model_id=model_id, context=self, worker_idx=self._worker_idx)
            elif scheme.model_id != model_id or scheme.context not in (None, self):
                raise RuntimeError(
                    f"this {type(scheme).__name__} already feeds model {scheme.model_id!r} of another "
                    "collector: a receiver scheme serves one model of one collector (ask the sender for "
                    "one receiver per collector: sender.receiver(worker_idx))")
            receivers[model_id] = scheme
        self._receiver_schemes = receivers
        if synchronize_weights:
            synchronized: dict[str, Any] = {}
            for model_id, scheme in receivers.items():
                if not scheme.synchronized_on_receiver and scheme.connect(worker_idx=self._worker_idx):
                    synchronized[model_id] = None
            if synchronized:  # the sender's weights, applied to this collector's model: to the workers
                self._apply_received(synchronized)

    #: Receiver schemes of another library (TorchRL's) whose sender drives them: it calls
    #: :meth:`_receive_weights_scheme` here (TorchRL's RPC and distributed collectors do), and
    #: each applies what it receives through ``update_policy_weights_``; never polled per batch.
    _driven_receivers: dict[str, Any] | None = None

    def _register_driven(self, driven: Mapping[str, Any], synchronize_weights: bool) -> None:
        """Initialise and connect schemes of the reference's API that are not rlcollect's, as the
        reference's ``register_scheme_receiver`` does."""
        for model_id, scheme in driven.items():
            if not scheme.initialized_on_receiver:
                scheme.init_on_receiver(model_id=model_id, context=self, worker_idx=self._worker_idx)
        self._driven_receivers = {**(self._driven_receivers or {}), **driven}
        if synchronize_weights:
            for scheme in driven.values():
                if not scheme.synchronized_on_receiver:
                    scheme.connect(worker_idx=self._worker_idx)

    def _shutdown_receivers(self) -> None:
        """Stop the receiver schemes registered here (threads, process groups); every shutdown
        does this."""
        receivers, self._receiver_schemes = self._receiver_schemes or {}, None
        driven, self._driven_receivers = self._driven_receivers or {}, None
        for scheme in [*receivers.values(), *driven.values()]:
            shutdown = getattr(scheme, "shutdown", None)
            if shutdown is not None:
                shutdown()

    def _receive_weights_scheme(self, model_version: int | None = None) -> None:
        """Receive through every receiver scheme: the driven ones (their sender called this;
        ``model_version``, TorchRL's, is not used: each update counts one version) and this
        collector's own (:meth:`_poll_receivers`).

        Raises:
            RuntimeError: no receiver scheme is registered (as in the reference).
        """
        if not self._receiver_schemes and not self._driven_receivers:
            raise RuntimeError("No receiver schemes registered: register_scheme_receiver() first")
        for scheme in (self._driven_receivers or {}).values():
            scheme.receive()  # applies and cascades through update_policy_weights_
        if self._receiver_schemes:
            self._poll_receivers()

    def _poll_receivers(self) -> None:
        """Take the newest weights of this collector's own receiver schemes (before each batch);
        forward those that changed."""
        received: dict[str, Any] = {}
        for model_id, scheme in (self._receiver_schemes or {}).items():
            if scheme.receive() is not None:
                received[model_id] = None  # applied to the receiver model: pull from it
        if received:
            self._apply_received(received)

    def _apply_received(self, forms: dict[str, Any]) -> None:
        """Weights that arrived from upstream: by default, an update of every worker."""
        self._update_weights(forms, None)

    def _model_ids(self) -> list[str]:
        return ["policy"]

    def receiver_model(self, model_id: str) -> torch.nn.Module:
        """The module of this collector that weights of ``model_id`` are applied to (what a
        receiver scheme asks its context: :class:`~rlcollect.weights.context.WeightContext`).

        Raises:
            KeyError: a model id this collector does not have.
        """
        raise NotImplementedError

