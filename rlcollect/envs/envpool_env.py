"""EnvPool as an env batch: a pool of envs stepped by one call, written into the buffers per step.

A source ``"envpool:<task id>"`` (e.g. ``"envpool:Pong-v5"``) builds one synchronous EnvPool of
``num_envs`` envs with Gymnasium's API; a pool built by ``envpool.make(..., env_type="gymnasium")``
is taken as it is. EnvPool resets a finished env at its next ``step`` (dropping that step's
action); the collector instead resets the finished envs at once, by id (``reset(env_ids)``, which
returns their observations only), as for any vector env without same-step autoreset: the step's
observation is the true final one, ``terminated`` and ``truncated`` are EnvPool's, and the next
frame starts from the reset observation, no action dropped.

An asynchronous pool (``batch_size`` < ``num_envs``: ``create_env_kwargs={"batch_size": B}``, or
a pool built so) is an :class:`EnvPoolStream`: each ``recv`` answers with whichever ``B`` envs
finished first, so no env waits for a slower one. Its batches hold frames in the order they
complete (see :mod:`rlcollect.rollout.stream`), ``B`` rows of them.

Seeds: EnvPool seeds its envs when the pool is built (env ``i`` with ``seed + i``, Gymnasium's
convention), not at ``reset``. A pool built here from a name is rebuilt with the collector's seed
when it is seeded; a pool you built keeps its own seed (a warning says so if another is asked for).

Examples:
    >>> batch = make_envpool_batch("envpool:CartPole-v1", num_envs=4)
    >>> batch.num_envs, batch.observation_space.shape
    (4, (4,))
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlcollect.common.callers import outside_stacklevel
from rlcollect.data.checks import check_vector_step
from rlcollect.envs.base import EnvBatch
from rlcollect.envs.vector import GymVectorEnv

__all__ = ["ENVPOOL_PREFIX", "EnvPoolEnv", "EnvPoolStream", "Received", "is_envpool", "make_envpool_batch"]

#: An env id with this prefix is built by EnvPool.
ENVPOOL_PREFIX = "envpool:"
#: EnvPool threads of a pool built from a name, unless ``create_env_kwargs`` gives ``num_threads``:
#: ``None`` lets EnvPool choose (a thread per core, at most one per env), as in a ``Collector``;
#: worker processes set 1, since the workers already step their pools side by side.
POOL_THREADS: int | None = None


def is_envpool(obj: Any) -> bool:
    """Whether ``obj`` is an EnvPool pool (without importing envpool if nothing did)."""
    module = sys.modules.get("envpool.python.envpool")
    return module is not None and isinstance(obj, module.EnvPoolMixin)


def _import_envpool() -> Any:
    try:
        import envpool
    except ImportError:
        raise ImportError("an 'envpool:...' env needs EnvPool: pip install rlcollect[envpool]") from None
    return envpool


def _build(task_id: str, num_envs: int, kwargs: dict[str, Any], seed: int) -> Any:
    envpool = _import_envpool()
    if task_id not in envpool.list_all_envs():
        raise ValueError(f"create_env_fn={ENVPOOL_PREFIX + task_id!r}: EnvPool has no task {task_id!r} "
                         "(envpool.list_all_envs() lists them, e.g. 'Pong-v5', 'HalfCheetah-v4')")
    for name in ("env_type", "num_envs", "seed"):
        if name in kwargs:
            raise ValueError(f"create_env_kwargs={kwargs!r}: {name!r} is set by the collector "
                             "(num_envs=, seed=); leave it out")
    rows = kwargs.get("batch_size", num_envs)
    if not isinstance(rows, int) or not 0 <= rows <= num_envs:
        raise ValueError(f"create_env_kwargs={{'batch_size': {rows!r}}} with num_envs={num_envs}: an "
                         "asynchronous EnvPool answers with batch_size of its num_envs envs at a time, "
                         f"so batch_size must be an int from 1 to num_envs={num_envs}")
    if POOL_THREADS is not None and "num_threads" not in kwargs:
        kwargs = {**kwargs, "num_threads": POOL_THREADS}
    return envpool.make(task_id, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)


def make_envpool_batch(source: Any, num_envs: int = 1, kwargs: dict[str, Any] | None = None,
                       max_episode_steps: int | None = None) -> EnvPoolEnv:
    """The env batch for ``"envpool:<task id>"`` (a pool of ``num_envs``) or an EnvPool pool."""
    if isinstance(source, str):
        task_id, options = source[len(ENVPOOL_PREFIX):], dict(kwargs or {})
        pool = _build(task_id, num_envs, options, seed=0)
        return _adapter(pool)(pool, max_episode_steps,
                              rebuild=lambda seed: _build(task_id, num_envs, options, seed))
    if num_envs != 1:
        raise ValueError(f"num_envs={num_envs} with an EnvPool pool of {source.config['num_envs']} envs: the "
                         "pool brings its own envs, leave num_envs=1")
    return _adapter(source)(source, max_episode_steps)


def _adapter(pool: Any) -> type[EnvPoolEnv]:
    config = pool.config
    return EnvPoolStream if config["batch_size"] not in (0, config["num_envs"]) else EnvPoolEnv


class EnvPoolEnv(GymVectorEnv):
    """A synchronous EnvPool pool (Gymnasium API) as an env batch; see the module docstring.

    Args:
        pool: built with ``env_type="gymnasium"`` and ``batch_size`` equal to ``num_envs``.
        max_episode_steps: collector-side episode limit (EnvPool has its own, from the task).
        rebuild: builds the same pool with another seed (``None``: the pool cannot be reseeded).
    """

    def __init__(self, pool: Any, max_episode_steps: int | None = None,
                 rebuild: Callable[[int], Any] | None = None) -> None:
        config = pool.config
        if "Gymnasium" not in type(pool).__name__:
            raise ValueError(f"rlcollect takes EnvPool pools with Gymnasium's API (envpool.make(..., "
                             f"env_type='gymnasium')), got a {type(pool).__name__}")
        EnvBatch.__init__(self, self._rows(config, max_episode_steps), max_episode_steps)
        self.env = pool
        self.observation_space, self.action_space = pool.observation_space, pool.action_space
        self._same_step = False
        self._seed, self._rebuild, self._warned = config["seed"], rebuild, False
        self.follows_num_envs = rebuild is not None  # built from a name, with num_envs envs

    def _rows(self, config: dict[str, Any], max_episode_steps: int | None) -> int:
        """The envs of a batch's column (all of them: the pool steps them together)."""
        return int(config["num_envs"])

    def step_info(self) -> dict[str, Any]:
        rows = super().step_info()
        if self._rebuild is not None:  # its reset does not reseed: rebuilt, as if it never stepped
            self.env.close()
            self.env = self._rebuild(self._seed)
        return rows

    def _reset_all(self, seeds: list[int] | None) -> Any:
        if seeds is not None and seeds[0] != self._seed:  # EnvPool seeds at creation only
            self._reseed(seeds[0])
        obs, _ = self.env.reset()
        return obs

    def _reseed(self, seed: int) -> None:
        if not 0 <= seed < 2**31:
            raise ValueError(f"seed {seed} (the collector's seed plus the pool's first env) is beyond the "
                             "seeds EnvPool takes (a C int): pass a seed below 2**31 less the number of envs")
        if self._rebuild is None:
            if not self._warned:
                warnings.warn(f"this EnvPool pool was seeded with seed={self._seed} when it was built, and "
                              f"EnvPool cannot reseed it: seed={seed} is not applied (build the pool with "
                              "it, or pass 'envpool:<task id>' for the collector to build it)",
                              RuntimeWarning, stacklevel=outside_stacklevel())
                self._warned = True
            return
        self.env.close()
        self.env, self._seed = self._rebuild(seed), seed

    def _reset_some(self, obs: Any, to_reset: np.ndarray) -> Any:
        ids = np.flatnonzero(to_reset).astype(np.int32)
        pool: Any = self.env
        fresh, _ = pool.reset(ids)  # the reset envs' observations only, in the order of ids
        if isinstance(obs, dict):
            merged = {key: np.array(value) for key, value in obs.items()}
            for key, value in merged.items():
                value[ids] = fresh[key]
            return merged
        out = np.array(obs)
        out[ids] = fresh
        return out

    def seed_action_spaces(self, seeds: list[int]) -> None:
        self.action_space.seed(seeds[0])


#: The entries of EnvPool's raw ``_recv`` state an answer reads, and the action entries ``_send``
#: takes, in the layout read here (one observation array, one player, one action array).
_RAW_STATE = ("obs", "reward", "done", "trunc", "info:env_id")
_RAW_ACTIONS = ["env_id", "players.env_id", "action"]


@dataclass(frozen=True)
class _RawAccess:
    """Where :data:`_RAW_STATE` sits in a pool's raw state list, and its actions' dtype."""

    state: tuple[int, ...]
    action_dtype: np.dtype[Any]


def _raw_access(pool: Any) -> _RawAccess | None:
    """How to step ``pool`` through EnvPool's raw ``_recv`` / ``_send`` (what its public ``recv``
    and ``send`` call after building a dict, an info dict and converting the arguments: about
    20 µs an answer), for a pool of the layout read here; ``None`` otherwise, or if this EnvPool
    lacks them: the public calls are used then."""
    keys, actions = getattr(pool, "_state_keys", None), getattr(pool, "_action_keys", None)
    spec = getattr(getattr(pool, "_spec", None), "_action_spec", None)
    if (not isinstance(keys, list) or list(actions or ()) != _RAW_ACTIONS or not spec
            or any(key not in keys for key in _RAW_STATE) or pool.config.get("max_num_players", 1) != 1
            or not callable(getattr(pool, "_recv", None)) or not callable(getattr(pool, "_send", None))):
        return None
    return _RawAccess(tuple(keys.index(key) for key in _RAW_STATE), np.dtype(spec[-1][0]))


@dataclass
class Received:
    """One answer of an asynchronous pool: ``B`` envs (``env_ids``, local to the pool), their
    observations, rewards and flags; ``completes`` marks the rows that end a step the collector
    sent (the others are the reset observations of envs that had finished), ``all_complete``
    whether every row does (most answers: no reset observation among them)."""

    env_ids: np.ndarray
    obs: Any
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    completes: np.ndarray
    all_complete: bool


class EnvPoolStream(EnvPoolEnv):
    """An asynchronous EnvPool pool (``batch_size`` ``B`` < ``num_envs`` ``N``) as an env batch of
    ``B`` rows whose envs change at every step: :mod:`rlcollect.rollout.stream` runs it, through
    :meth:`recv` and :meth:`send` (``step`` is not used).

    EnvPool resets a finished env at the next action sent to it (which it ignores) and answers
    with the reset observation; :meth:`recv` marks such rows as not completing a step. ``N`` must
    be a multiple of ``B`` so that the envs in flight can be received to the last before a reset.
    """

    streams = True

    def __init__(self, pool: Any, max_episode_steps: int | None = None,
                 rebuild: Callable[[int], Any] | None = None) -> None:
        super().__init__(pool, max_episode_steps, rebuild)
        self.pool_size = int(pool.config["num_envs"])
        self._finishing = np.ones(self.pool_size, dtype=bool)  # the next answer is a reset observation
        self._resets = self.pool_size  # envs whose _finishing is set
        self._complete = np.ones(self.num_envs, dtype=bool)  # an answer's completes, all set (read only)
        self._in_flight = 0  # envs sent an action (or a reset) and not received yet
        self._raw = _raw_access(pool)  # for the pool self.env holds (looked at again when rebuilt)

    def _rows(self, config: dict[str, Any], max_episode_steps: int | None) -> int:
        rows, size = int(config["batch_size"]), int(config["num_envs"])
        if size % rows:
            raise ValueError(f"an asynchronous EnvPool of num_envs={size} with batch_size={rows}: num_envs "
                             "must be a multiple of batch_size (so that every env in flight can be received)")
        if max_episode_steps is not None:
            raise ValueError(f"max_frames_per_traj={max_episode_steps} with an asynchronous EnvPool: EnvPool "
                             "resets its envs itself there; set its own limit instead, "
                             f"create_env_kwargs={{'max_episode_steps': {max_episode_steps}}}")
        return rows

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        """Reset every env (the pool rebuilt with ``seeds[0]`` where it can be); the first answers
        come from :meth:`recv`. Nothing is written at ``slot``."""
        if seeds is not None and seeds[0] != self._seed:
            self._reseed(seeds[0])
        pool: Any = self.env
        while self._in_flight > 0:  # receive (and drop) what is still in flight
            pool.recv()
            self._in_flight -= self.num_envs
        pool.async_reset()
        self._in_flight = self.pool_size
        self._finishing[:] = True
        self._resets = self.pool_size
        self._steps[:] = 0

    def _reseed(self, seed: int) -> None:
        if self._rebuild is not None:
            self._in_flight = 0  # the pool is rebuilt: nothing of the old one is waited for
        super()._reseed(seed)
        self._raw = _raw_access(self.env)

    def step_info(self) -> dict[str, Any]:
        raise TypeError("info_keys with an asynchronous EnvPool (batch_size < num_envs): its rows are not "
                        "envs; use a synchronous pool to store infos")

    def recv(self, step: int) -> Received:
        """The next ``B`` envs to answer (``step``: the batch step, for error messages)."""
        pool: Any = self.env
        raw = self._raw
        if raw is None:
            obs, reward, terminated, truncated, info = pool.recv()
            env_ids = info["env_id"]
        else:  # what the public recv returns, without its dicts
            state = pool._recv()
            obs, reward, done, truncated, env_ids = (state[i] for i in raw.state)
            terminated = done & ~truncated
        self._in_flight -= self.num_envs
        if self.check_writes:
            buffers = self._buffers
            assert buffers is not None
            check_vector_step(obs, reward, terminated, truncated, buffers.obs_ext_np, buffers.dict_obs,
                              step=step)
        ids = np.asarray(env_ids, dtype=np.intp)  # numpy's index type: the fastest to index with
        ended = terminated | truncated
        if self._resets:  # some env answers with its reset observation next: are they among these?
            completes = ~self._finishing[ids]
            complete = int(np.count_nonzero(completes))
            finishing = ended & completes
            self._finishing[ids] = finishing
            self._resets += int(np.count_nonzero(finishing)) - (len(ids) - complete)
            return Received(ids, obs, reward, terminated, truncated, completes, complete == len(ids))
        ends = int(np.count_nonzero(ended))  # (cheaper than ended.any())
        if ends:  # none does (most answers): no per-env lookup unless an episode ends
            self._finishing[ids] = ended
            self._resets = ends
        return Received(ids, obs, reward, terminated, truncated, self._complete, True)

    def send(self, action: np.ndarray, env_ids: np.ndarray) -> None:
        """Send ``action`` (``[B, ...]``) to the envs ``env_ids``."""
        pool: Any = self.env
        raw = self._raw
        if raw is None:
            pool.send(action, env_ids)
        else:  # the arrays the public send builds (copies: EnvPool's threads read them later)
            ids = env_ids.astype(np.int32)
            pool._send([ids, ids, action.astype(raw.action_dtype, order="C")])
        self._in_flight += len(env_ids)

    def step(self, t: int) -> None:
        raise RuntimeError("an asynchronous EnvPool is stepped by rlcollect.rollout.stream (recv / send)")
