"""Batched inference for worker processes: one policy server, in the collector's process.

Env workers run their usual rollout loop with a :class:`ServedPolicy` in place of a policy. At step
``t`` it sends the server ``t`` (4 bytes) and waits for one byte back. The server
(:class:`PolicyServer`, a thread of the collector's process) takes whichever workers are waiting,
reads their observations straight from the shared-memory slot each one is filling, runs the policy
once on all of them, and writes the actions, the policy's extras and the policy version back into
the slots before it answers. No observation or action crosses a pipe; there is one copy of the
weights, and a weight update waits for the forward pass under way. A worker that steps its envs
in groups (``AsyncBatchedCollector(env_groups=G)``) has a pipe per group, each served as a worker
of its own, and asks for one group's actions while it steps another's envs.

Example (the server and one worker's side, in one process):
    >>> import gymnasium as gym, torch
    >>> from rlcollect.data.buffers import BatchBuffers
    >>> from rlcollect.data.layout import BatchLayout, Field
    >>> from rlcollect.policies.adapters import make_policy
    >>> layout = BatchLayout((Field(("observation",), (4,), torch.float32),),
    ...                      Field(("action",), (), torch.int64))
    >>> slot = BatchBuffers.allocate(layout, num_envs=2, num_steps=3)  # 2 workers x 1 env
    >>> slot.obs_ext[("observation",)][1, 0] = 1.0
    >>> policy = make_policy(lambda obs: obs.sum(-1).gt(0).long(), gym.spaces.Box(-2, 2, (4,)),
    ...                      gym.spaces.Discrete(2), num_envs=1)
    >>> server = PolicyServer(policy, [slot], envs_per_worker=1, timeout=5.0)
    >>> client = ServedPolicy(server.connect(1), policy.extras, timeout=5.0)
    >>> server.assign(1, slot=0)
    >>> server.start()
    >>> client.act(0)  # worker 1, step 0: its action is in the slot now
    >>> slot.action[1, 0].item(), slot.policy_version[1, 0].item()
    (1, 0)
    >>> server.stop(1.0)
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from typing import Any

import torch
from tensordict.nn import InteractionType, set_interaction_type

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import Field
from rlcollect.policies.adapter import EpisodeStarts, PolicyAdapter

__all__ = ["PolicyServer", "ServedPolicy"]

_STEP = struct.Struct("<i")
_SERVED, _FAILED, _STOPPED = b"\x01", b"\x00", b"\x02"


class ServedPolicy(PolicyAdapter):
    """The worker's side: asks the server for the actions of step ``t`` and waits for them.

    Picklable to a worker process while it starts (the pipe ends travel with it).

    Args:
        conn: this worker's end of its pipe to the server (:meth:`PolicyServer.connect`), or one
            pipe per group of its envs (:attr:`groups`): the server then serves each group as a
            worker of its own, and the rollout loop steps one group while the server acts for the
            others (:func:`~rlcollect.rollout.loop.step_in_groups`).
        extras: what the served policy writes besides the action.
        timeout: seconds to wait for one answer.
        action_dtype: the dtype of the served policy's actions (its dry step's), which decides
            how the worker's batch stores them as it does for a policy of its own.
        is_init: the served policy needs ``is_init``, which this side writes into the slot (from
            the flags of the step before) before it asks for the step's actions.
    """

    _starts: list[EpisodeStarts] | None = None  # set by bind()
    #: each group's envs, ``(start, stop)`` rows of the worker's; set by bind()
    rows: tuple[tuple[int, int], ...] = ()

    def __init__(self, conn: Connection | Sequence[Connection], extras: tuple[Field, ...], timeout: float,
                 action_dtype: torch.dtype | None = None, is_init: bool = False) -> None:
        self._conns = [conn] if isinstance(conn, Connection) else list(conn)
        self.groups = len(self._conns)
        self.extras, self._timeout = extras, timeout
        self.action_dtype = action_dtype
        self.reads_is_init = is_init
        self._parent = -1  # the worker's parent process, read in the worker by bind()
        self._asked: set[int] = set()  # the groups whose answer is due

    def _views(self, buffers: BatchBuffers) -> dict[str, Any]:
        # in the worker; the server writes the actions itself
        size = buffers.num_envs // self.groups
        rows = tuple((g * size, (g + 1) * size) for g in range(self.groups))
        starts = ([EpisodeStarts(buffers, slice(*r)) for r in rows] if buffers.is_init is not None
                  else None)
        return {"_parent": os.getppid(), "_starts": starts, "rows": rows}

    def act(self, t: int) -> None:
        for group in range(self.groups):
            self.ask(t, group)
        for group in range(self.groups):
            self.wait(group)

    def ask(self, t: int, group: int) -> None:
        """Ask for the actions of ``group``'s envs at step ``t`` (their observations are in slot
        ``t``); :meth:`wait` for them before stepping those envs."""
        if self._starts is not None:  # the server reads is_init from the slot
            self._starts[group].at(t)
        self._conns[group].send_bytes(_STEP.pack(t))
        self._asked.add(group)

    def wait(self, group: int) -> None:
        """Wait until the server has written the actions ``group``'s envs asked for."""
        conn = self._conns[group]
        self._asked.discard(group)
        deadline = time.monotonic() + self._timeout
        while not conn.poll(min(1.0, max(0.0, deadline - time.monotonic()))):
            if os.getppid() != self._parent:  # the collector's process is gone
                raise EOFError("the collector's process exited")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the policy server did not answer within timeout={self._timeout} s")
        answer = conn.recv_bytes()
        if answer == _STOPPED:
            raise RuntimeError("the policy server stopped: the collector is shutting down")
        if answer != _SERVED:
            raise RuntimeError("the policy server failed (its error is raised by the collector)")

    def settle(self) -> None:
        """Wait for every answer still due (an env failed while the server acted for another
        group): the next batch's requests must not meet an old answer."""
        for group in sorted(self._asked):
            with contextlib.suppress(Exception):  # the env's error is the one raised
                self.wait(group)


class PolicyServer:
    """Serves every worker's envs with one policy, in a thread of this process.

    Worker ``w`` owns rows ``[w * M, (w + 1) * M)`` of each slot; :meth:`assign` says which slot it
    fills now. A forward pass takes the waiting workers (at most ``max_batch_size`` envs; with
    ``min_batch_size`` more than one worker's envs, it waits up to ``server_timeout`` seconds for
    more to arrive first).

    Args:
        policy: the adapter that runs (its :meth:`~PolicyAdapter.outputs`).
        slots: the collector's slots (every worker's rows).
        envs_per_worker: ``M``.
        timeout: seconds a worker may go without answering before it is presumed gone.
        max_batch_size, min_batch_size: envs per forward pass (``None``: all).
        server_timeout: seconds to wait for ``min_batch_size`` envs.
        exploration_type: the interaction type the policy runs under.
    """

    def __init__(
        self,
        policy: PolicyAdapter,
        slots: Sequence[BatchBuffers],
        envs_per_worker: int,
        *,
        timeout: float,
        max_batch_size: int | None = None,
        min_batch_size: int = 1,
        server_timeout: float = 0.0,
        exploration_type: InteractionType = InteractionType.RANDOM,
    ) -> None:
        self.policy, self.envs_per_worker = policy, envs_per_worker
        self._targets = [[s.action, *(s.extras[f.key] for f in policy.extras)] for s in slots]
        self._obs = [s.obs_ext for s in slots]
        self._is_init: list[torch.Tensor] | None = None  # each slot's, indexed like the slots
        if policy.reads_is_init:
            self._is_init = [s.is_init for s in slots if s.is_init is not None]
            assert len(self._is_init) == len(slots), "every worker's slot holds is_init for this policy"
        #: the state each env's policy carries (see :class:`~rlcollect.policies.adapter.Carried`),
        #: as its last step wrote it; every worker's envs, in the slots' rows
        self.state = {c.written: torch.zeros((slots[0].num_envs, *policy.carry[c.written].shape[1:]),
                                             dtype=policy.carry[c.written].dtype) for c in policy.carried}
        extras = [f.key for f in policy.extras]
        self._state_outputs = [(c.written, 1 + extras.index(c.written)) for c in policy.carried]
        self._versions = [s.policy_version for s in slots]
        self._workers_per_pass = max(1, (max_batch_size or slots[0].num_envs) // envs_per_worker)
        self._min, self._server_timeout = min_batch_size, server_timeout
        self._timeout = timeout  # a forward pass running longer is a hang (check() raises it)
        self._pass_began: float | None = None  # when the forward pass under way began
        self._exploration_type = exploration_type
        self.version = 0
        self.lock = threading.Lock()  # held during a forward pass; a weight update takes it too
        self.forward_passes = self.envs_served = 0
        self.error: BaseException | None = None
        self._error_text = ""
        self._slot_of: dict[int, int] = {}
        self._conns: dict[Connection, int] = {}
        self._new: list[tuple[int, Connection]] = []  # connections the server thread takes over
        self._wake_read, self._wake_write = Pipe(duplex=False)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlcollect-policy-server", daemon=True)

    # -- the collector's side ---------------------------------------------------------------------
    def connect(self, worker: int) -> Connection:
        """A new pipe for worker ``worker`` (at its start or restart); return the worker's end.
        Its previous pipe, if any, is closed by the server thread."""
        ours, theirs = Pipe()
        with self.lock:
            self._new.append((worker, ours))
        if self._thread.is_alive():
            self._wake_write.send_bytes(b"")
        return theirs

    def assign(self, worker: int, slot: int) -> None:
        """Worker ``worker`` is about to fill slot ``slot``."""
        self._slot_of[worker] = slot

    def start(self) -> None:
        """Start serving (idempotent)."""
        if not self._thread.is_alive() and not self._stopping.is_set():
            self._thread.start()

    def check(self) -> None:
        """Raise the policy's error, if the server stopped on one, or a ``TimeoutError`` if its
        forward pass under way has run longer than ``timeout`` (a policy that hangs)."""
        self._check_pass(self._timeout)
        if self.error is not None:
            error, self.error = self.error, None
            if hasattr(error, "add_note"):
                error.add_note(f"raised in the policy server; its traceback:\n{self._error_text}")
            raise error

    def stalled(self) -> None:
        """Called when a worker is overdue: a ``TimeoutError`` if the server is the cause (a forward
        pass under way for over half of ``timeout``, which the worker waits for)."""
        self._check_pass(self._timeout / 2)

    def _check_pass(self, limit: float) -> None:
        began = self._pass_began
        if began is not None and time.monotonic() - began > limit:
            raise TimeoutError(
                f"the policy server's forward pass has run {time.monotonic() - began:.1f} s, while "
                f"timeout={self._timeout} s: the policy's call on the envs' observations did not return "
                "(a policy that hangs; for a policy that is only slow, raise timeout=)")

    def stop(self, timeout: float) -> None:
        """Stop the thread (within ``timeout`` s), tell every worker (one waiting for its actions
        gives up its batch at once), and close every pipe; idempotent.

        Closing is not enough: a forked worker holds copies of the server's ends of the pipes,
        so it would see no end-of-file and wait out its ``timeout``.
        """
        self._stopping.set()
        if self._thread.is_alive():
            self._wake_write.send_bytes(b"")
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._take_new_connections()
            for conn in self._conns:
                self._answer(conn, _STOPPED)
            for conn in [*self._conns, self._wake_read, self._wake_write]:
                conn.close()
            self._conns.clear()
            self._new.clear()

    # -- the server thread ------------------------------------------------------------------------
    def _run(self) -> None:
        # one torch thread, as in every worker, set by this thread itself: without it the MKL ops
        # of a new thread ran on a team of threads (whatever torch.get_num_threads() said), each
        # small op waiting on the cores the env workers are busy with; the collector's thread
        # keeps your setting
        torch.set_num_threads(1)
        try:
            with torch.inference_mode(), set_interaction_type(self._exploration_type):
                while not self._stopping.is_set():
                    requests, per_pass = self._gather(), self._workers_per_pass
                    for start in range(0, len(requests), per_pass):
                        self._serve(requests[start : start + per_pass])
        except BaseException as error:  # the collector raises it; the workers are told to stop
            self._error_text = traceback.format_exc()
            self.error = error
            for conn in self._conns:
                self._answer(conn, _FAILED)

    def _take_new_connections(self) -> None:
        with self.lock:
            new, self._new = self._new, []
        for worker, conn in new:
            for old in [c for c, w in self._conns.items() if w == worker]:
                del self._conns[old]
                old.close()
            self._conns[conn] = worker

    def _gather(self) -> list[tuple[Connection, int, int]]:
        """Wait for requests; return ``(conn, worker, t)`` of each (at least ``min_batch_size``
        envs' worth, unless ``server_timeout`` passed first)."""
        requests: list[tuple[Connection, int, int]] = []
        deadline = None
        while not self._stopping.is_set():
            self._take_new_connections()
            asked = {id(conn) for conn, _, _ in requests}
            waiting = [c for c in self._conns if id(c) not in asked]
            timeout = 0.5 if deadline is None else max(0.0, deadline - time.monotonic())
            for conn in wait([*waiting, self._wake_read], timeout):
                if conn is self._wake_read:
                    self._wake_read.recv_bytes()
                    continue
                assert isinstance(conn, Connection)
                try:
                    (t,) = _STEP.unpack(conn.recv_bytes())
                except (EOFError, OSError):  # the worker died: the pool restarts it
                    self._conns.pop(conn, None)
                    conn.close()
                    continue
                requests.append((conn, self._conns[conn], t))
            if requests and deadline is None:
                deadline = time.monotonic() + self._server_timeout
            if requests and (len(requests) * self.envs_per_worker >= self._min
                             or time.monotonic() >= (deadline or 0.0)):
                return requests
        return requests

    def _serve(self, requests: list[tuple[Connection, int, int]]) -> None:
        m = self.envs_per_worker
        blocks = [(self._slot_of[w], slice(w * m, (w + 1) * m), t) for _, w, t in requests]
        keys = list(self._obs[0])
        if len(blocks) == 1:
            slot, rows, t = blocks[0]
            # a copy: what the policy does to its input never reaches the workers' slots
            obs = {key: self._obs[slot][key][rows, t].clone() for key in keys}
        else:
            obs = {key: torch.cat([self._obs[slot][key][rows, t] for slot, rows, t in blocks])
                   for key in keys}
        obs.update(self._state_inputs(blocks))
        with self.lock:
            self._pass_began = time.monotonic()
            try:
                outputs = self.policy.outputs(obs)
            finally:
                self._pass_began = None
            version = self.version
        for i, (slot, rows, t) in enumerate(blocks):
            for target, output in zip(self._targets[slot], outputs, strict=True):
                target[rows, t] = output[i * m : (i + 1) * m]
            self._versions[slot][rows, t] = version
            for key, index in self._state_outputs:  # what these envs' next step reads
                self.state[key][rows] = outputs[index][i * m : (i + 1) * m]
        self.forward_passes += 1
        self.envs_served += len(blocks) * m
        for conn, _, _ in requests:
            self._answer(conn, _SERVED)

    def _state_inputs(self, blocks: list[tuple[int, slice, int]]) -> dict[tuple[str, ...], torch.Tensor]:
        """``is_init`` and the carried state of the requests' envs, where the policy needs them."""
        if not self.state and self._is_init is None:
            return {}
        slots = self._is_init
        is_init = None if slots is None else torch.cat([slots[slot][rows, t] for slot, rows, t in blocks])
        previous = {key: torch.cat([state[rows] for _, rows, _ in blocks])
                    for key, state in self.state.items()}
        inputs = self.policy.state_inputs(previous, is_init)
        if self.policy.reads_is_init and is_init is not None:
            inputs[("is_init",)] = is_init
        return inputs

    @staticmethod
    def _answer(conn: Connection, message: bytes) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):  # a dead worker: noticed by the pool
            conn.send_bytes(message)
