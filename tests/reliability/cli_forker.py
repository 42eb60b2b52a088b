"""A process that runs ``rlcollect`` commands in forked children, for the kill test.

It imports the CLI once, then reads one JSON argument list per line on stdin; for each it forks a
child that becomes a process group of its own and runs ``rlcollect.cli.main.main(argv)``, prints
``pid <pid>`` at once, and ``status <pid> <code>`` when the child ends (``code`` is the exit status,
or ``-signum`` for a child a signal killed). Forking saves each run the seconds of importing torch,
so a hundred runs fit in a test; the child is the CLI process a user's shell would start.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys

import gymnasium as gym
import torch

import rlcollect.cli.collect  # noqa: F401  (imported here, not in each child)
from rlcollect.cli.main import main


def _run_child(argv: list[str], stderr: int) -> None:
    os.setpgid(0, 0)  # the child and its workers: one group, as a shell's job
    code = 1
    try:
        os.dup2(stderr, 2)
        os.close(stderr)  # fd 2 is the one the run writes to
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(argv)
        sys.stderr.write(out.getvalue())
    except KeyboardInterrupt:  # before main() caught signals: Python dies by the signal then
        _die_by_sigint()
    finally:
        sys.stderr.flush()
        os._exit(code)


def _die_by_sigint() -> None:
    """End as a Python process does on a Ctrl-C it did not catch: killed by SIGINT."""
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def serve() -> None:
    torch.set_num_threads(1)
    gym.make("CartPole-v1").close()  # its module imported too
    for line in sys.stdin:
        argv = json.loads(line)
        # where the child's output goes: made here, so it exists even if a signal ends the child at once
        stderr = os.open(argv.pop(0), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        pid = os.fork()
        if pid == 0:
            try:
                _run_child(argv, stderr)
            except KeyboardInterrupt:  # a Ctrl-C sent the instant the child began, before its try
                _die_by_sigint()
            finally:
                os._exit(1)  # never back into this loop, whatever happened
        os.close(stderr)
        with contextlib.suppress(OSError):  # as a shell does: the group exists before it is signalled
            os.setpgid(pid, pid)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"status {pid} {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    serve()
