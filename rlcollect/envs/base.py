"""The interface every env adapter implements: reset and step straight into batch buffers."""

from __future__ import annotations

import abc
import sys
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcollect.common.callers import outside_stacklevel
from rlcollect.data.buffers import BatchBuffers
from rlcollect.envs.env_state import NotData, capture, restore

__all__ = ["EnvBatch", "check_envs_data", "own_copy", "source_env"]


class EnvBatch(abc.ABC):
    """``num_envs`` environments that write their steps into :class:`BatchBuffers` in place.

    Subclasses implement :meth:`reset` and :meth:`step`. Episodes that end are reset in the same
    step: the true final observation goes to ``buffers.finals`` and the reset observation to the
    next observation slot. ``max_episode_steps`` truncates episodes on the collector's side.
    """

    num_envs: int
    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    #: Check each value's shape and type before writing it (``check="full"``; see ``data.checks``).
    check_writes: bool = True
    #: Built with as many envs as asked (``num_envs``), unlike a vector env brought whole.
    follows_num_envs: bool = False
    #: One env without a batch dimension of its own (a TorchRL env with ``batch_size=[]``): a
    #: TensorDict policy is then called on one env's TensorDict, as TorchRL does.
    unbatched: bool = False
    #: The rows are not envs: frames of ``pool_size`` envs come in the order they complete (an
    #: asynchronous pool's ``recv`` / ``send``, run by ``rollout.stream`` instead of ``step``).
    streams: bool = False
    #: The envs behind the rows (``num_envs`` unless :attr:`streams`).
    pool_size: int
    #: A policy that reads ``is_init`` gets it from the env (a TorchRL env's ``InitTracker``), not
    #: from the collector, as in TorchRL's collectors.
    observes_episode_starts: bool = False
    #: Some steps are the envs' own resets, not transitions (a ``NEXT_STEP`` vector env that
    #: cannot reset some of its envs): :meth:`step` marks them ``False`` in ``buffers.mask``.
    takes_own_resets: bool = False

    def __init__(self, num_envs: int, max_episode_steps: int | None) -> None:
        self.num_envs = self.pool_size = num_envs
        self._limit: int = max_episode_steps if max_episode_steps is not None else sys.maxsize
        self._steps: Any = np.zeros(num_envs, dtype=np.int64)  # steps into the current episode
        self._buffers: BatchBuffers | None = None

    def bind(self, buffers: BatchBuffers) -> None:
        """Point the adapter at the buffers it writes (called once, before any reset or step)."""
        self._buffers = buffers
        self._info_arrays = buffers.infos_np  # the info_keys' [N, T, ...] arrays (none: no infos kept)

    def step_info(self) -> dict[str, Any]:
        """The first env's info after a reset and one step with a sampled action, to lay out
        ``info_keys`` (:mod:`rlcollect.envs.infos`); the collector resets every env again before
        it collects. Env kinds without Gymnasium infos refuse ``info_keys`` here."""
        raise TypeError(f"info_keys: {type(self).__name__} gives no Gymnasium step infos to store; "
                        "info_keys takes Gymnasium envs, vector envs and synchronous EnvPool pools "
                        "(a TorchRL env's infos reach the batch through its info_dict_reader)")

    @abc.abstractmethod
    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        """Reset every env (env ``i`` with ``seeds[i]`` if given); write observations at ``slot``."""

    @abc.abstractmethod
    def step(self, t: int) -> None:
        """Step every env with ``action[:, t]``; write step ``t`` and observation slot ``t + 1``."""

    #: :meth:`step_rows` steps some of the envs (a list of Gymnasium envs can; a vector env or a
    #: pool steps them all at once).
    steps_rows: bool = False

    def step_rows(self, t: int, start: int, stop: int) -> None:
        """Step envs ``start`` to ``stop - 1`` only, as :meth:`step` steps them all (a worker that
        steps its envs in groups, each while the policy server acts for another); adapters whose
        envs step together (a vector env, a pool) cannot."""
        raise TypeError(f"{type(self).__name__} steps all its envs at once; env_groups > 1 takes a "
                        "list of Gymnasium envs (an env id or a function building one env)")

    def prepare_policy(self, policy: Any) -> None:
        """Give the user's policy what it takes from the env before its first call (TorchRL's
        ``RandomPolicy()`` without a spec takes the env's); most adapters have nothing to give."""
        return None

    def finish(self, steps: int) -> None:
        """Write what the steps kept aside, once per batch after its last step (``steps`` taken);
        adapters that write everything as they step keep this no-op."""
        return None

    @abc.abstractmethod
    def seed_action_spaces(self, seeds: list[int]) -> None:
        """Seed each env's own action space (Gymnasium's convention: env ``i`` with ``s + i``)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the envs."""

    @abc.abstractmethod
    def _state_objects(self) -> Any:
        """The objects whose attributes hold the envs' state (:mod:`rlcollect.envs.env_state`);
        ``None``: the envs are never held in a state_dict, as TorchRL envs are not in TorchRL's."""

    def state_dict(self) -> dict[str, Any]:
        """Episode step counters and the envs' state as data, where it is data (see
        :mod:`rlcollect.envs.env_state`); else ``None`` for the envs, with a warning naming what
        is not data."""
        held = self._state_objects()
        envs: dict[str, Any] | None = None
        if held is not None:
            try:
                envs = capture(held)
            except NotData as error:  # envs holding handles (sockets, simulators, C objects)
                warnings.warn(
                    f"the envs' state is not data ({error}): this state_dict holds counters and "
                    "weights but not the envs' state; a collector loading it goes on with its own "
                    "envs' episodes (new trajectory ids), never an observation of these",
                    stacklevel=outside_stacklevel(),
                )
        return {"steps": torch.tensor(self._steps, dtype=torch.int64), "envs": envs}

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Write what :meth:`state_dict` returned into these envs, in place; ``False`` where it
        holds no envs (they were not data): the envs then go on with their own episodes, step
        counters included. No code is loaded from the state: the envs are the ones this collector
        built, and the state only sets their attributes.

        Raises:
            ValueError: the envs' state is not data (pickle bytes: an old or crafted state) or is
                of other envs (the first difference named); the envs are then unchanged.
        """
        envs = check_envs_data(state)
        if envs is None:
            return False
        steps = np.asarray(state["steps"]).tolist()
        restore(self._state_objects(), envs)
        self._steps[:] = steps
        return True


def check_envs_data(state: Any) -> dict[str, Any] | None:
    """The envs' state in ``state`` (an :meth:`EnvBatch.state_dict`), once it is known to be data
    (a collector with workers checks each worker's before it sends any).

    Raises:
        ValueError: it is something else, such as pickle bytes (never unpickled).

    Examples:
        >>> check_envs_data({"steps": None, "envs": None}) is None
        True
        >>> check_envs_data({"steps": None, "envs": b"\\x80"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: load_state_dict: the state's envs are bytes, not the data state_dict() writes ...
    """
    envs = state.get("envs") if isinstance(state, dict) else None
    if envs is None or isinstance(envs, dict):
        return envs
    raise ValueError(
        f"load_state_dict: the state's envs are {type(envs).__name__}, not the data state_dict() "
        "writes (a dict); rlcollect never unpickles a state's bytes (a state saved by rlcollect "
        "before states were data, or a crafted one): save it again with this version")


def own_copy(obs: Any, row: int | None = None) -> Any:
    """A copy of one env's (possibly Dict) observation, or of row ``row`` of a batched one, kept
    past the env's next call: an env may return an array it then rewrites in place (its state,
    which its reset zeroes), and a vector env may reuse its arrays.

    Examples:
        >>> state = np.zeros(2)
        >>> kept = own_copy({"x": state})
        >>> state[:] = 1
        >>> kept["x"].tolist(), own_copy(np.eye(2), row=1).tolist()
        ([0.0, 0.0], [0.0, 1.0])
    """
    if isinstance(obs, dict):
        return {key: own_copy(value, row) for key, value in obs.items()}
    # asarray, then copy: np.array on a torch tensor warns (its __array__ takes no ``copy``)
    return np.asarray(obs if row is None else obs[row]).copy()


def source_env(envs: Any) -> Any:
    """The env object behind an env batch, as TorchRL's ``Collector.env`` is: the TorchRL env (with
    the transforms the collector appended), the ``VectorEnv``, the EnvPool pool or the one
    Gymnasium env given as such; for copies of a Gymnasium env, their list."""
    given = getattr(envs, "given", None)
    if given is not None:
        return given
    return envs.env if hasattr(envs, "env") else getattr(envs, "envs", envs)
