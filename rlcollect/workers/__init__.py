"""Workers layer: the worker process loop and the parent's pool of workers."""

from rlcollect.workers.pool import WorkerPool
from rlcollect.workers.worker import BatchReport, WorkerFailure, WorkerSetup, worker_main

__all__ = ["BatchReport", "WorkerFailure", "WorkerPool", "WorkerSetup", "worker_main"]
