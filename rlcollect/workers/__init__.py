"""Workers layer: one worker protocol (:class:`Worker`), one pool, two transports.

Worker processes (:class:`ProcessTransport`: pipes and shared-memory slots) and Ray actors
(:class:`RayTransport`: actor calls and the object store) run the same :class:`Worker` and are
driven by the same :class:`WorkerPool`.
"""

from rlcollect.workers.pool import WorkerPool
from rlcollect.workers.ray_transport import RayTransport
from rlcollect.workers.transport import ProcessTransport, Transport
from rlcollect.workers.worker import BatchReport, Worker, WorkerFailure, WorkerInfo, WorkerSetup

__all__ = ["BatchReport", "ProcessTransport", "RayTransport", "Transport", "Worker", "WorkerFailure",
           "WorkerInfo", "WorkerPool", "WorkerSetup"]
