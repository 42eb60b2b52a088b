"""EnvPool as an env batch: a pool of envs stepped by one call, written into the buffers per step.

A source ``"envpool:<task id>"`` (e.g. ``"envpool:Pong-v5"``) builds one synchronous EnvPool of
``num_envs`` envs with Gymnasium's API; a pool built by ``envpool.make(..., env_type="gymnasium")``
is taken as it is. EnvPool resets a finished env at its next ``step`` (dropping that step's
action); the collector instead resets the finished envs at once, by id (``reset(env_ids)``, which
returns their observations only), as for any vector env without same-step autoreset: the step's
observation is the true final one, ``terminated`` and ``truncated`` are EnvPool's, and the next
frame starts from the reset observation, no action dropped.

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
from typing import Any

import numpy as np

from rlcollect.envs.base import EnvBatch
from rlcollect.envs.vector import GymVectorEnv

__all__ = ["ENVPOOL_PREFIX", "EnvPoolEnv", "is_envpool", "make_envpool_batch"]

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
    if POOL_THREADS is not None and "num_threads" not in kwargs:
        kwargs = {**kwargs, "num_threads": POOL_THREADS}
    return envpool.make(task_id, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)


def make_envpool_batch(source: Any, num_envs: int = 1, kwargs: dict[str, Any] | None = None,
                       max_episode_steps: int | None = None) -> EnvPoolEnv:
    """The env batch for ``"envpool:<task id>"`` (a pool of ``num_envs``) or an EnvPool pool."""
    if isinstance(source, str):
        task_id, options = source[len(ENVPOOL_PREFIX):], dict(kwargs or {})
        pool = _build(task_id, num_envs, options, seed=0)
        return EnvPoolEnv(pool, max_episode_steps,
                          rebuild=lambda seed: _build(task_id, num_envs, options, seed))
    if num_envs != 1:
        raise ValueError(f"num_envs={num_envs} with an EnvPool pool of {source.config['num_envs']} envs: the "
                         "pool brings its own envs, leave num_envs=1")
    return EnvPoolEnv(source, max_episode_steps)


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
        if config["batch_size"] != config["num_envs"]:
            raise ValueError(f"an asynchronous EnvPool (batch_size={config['batch_size']} < num_envs="
                             f"{config['num_envs']}) is not supported yet: build it with batch_size=num_envs")
        EnvBatch.__init__(self, config["num_envs"], max_episode_steps)
        self.env = pool
        self.observation_space, self.action_space = pool.observation_space, pool.action_space
        self._same_step = False
        self._seed, self._rebuild, self._warned = config["seed"], rebuild, False
        self.follows_num_envs = rebuild is not None  # built from a name, with num_envs envs

    def _reset_all(self, seeds: list[int] | None) -> Any:
        if seeds is not None and seeds[0] != self._seed:  # EnvPool seeds at creation only
            self._reseed(seeds[0])
        obs, _ = self.env.reset()
        return obs

    def _reseed(self, seed: int) -> None:
        if self._rebuild is None:
            if not self._warned:
                warnings.warn(f"this EnvPool pool was seeded with seed={self._seed} when it was built, and "
                              f"EnvPool cannot reseed it: seed={seed} is not applied (build the pool with "
                              "it, or pass 'envpool:<task id>' for the collector to build it)",
                              RuntimeWarning, stacklevel=4)
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
