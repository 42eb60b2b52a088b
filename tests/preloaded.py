"""Run a Python script or module as ``python script.py`` would, without paying the imports each time.

A documentation block or a CLI command run as a fresh interpreter spends 3 to 4 s of CPU importing
torch, tensordict and Gymnasium before its first line does anything; the default test run starts
dozens of them. :class:`Preloaded` keeps one helper interpreter per test process that has imported
them (and rlcollect) once, and forks it for each run. The forked process is what a fresh
interpreter is, but for the modules already imported: it is the main process (no
``multiprocessing`` parent), has its own process group, folder, environment, ``sys.argv`` and
``sys.path[0]``, runs the code as ``__main__`` (so the main-module guard, spawn and forkserver
workers behave as with ``python script.py``), keeps what the imports wrote into the environment
over the environment it is given (as a new interpreter's imports would), reseeds numpy's global
generator as a new process would, runs the ``atexit`` handlers and exits with the code's exit
status.

One block (the README's quick start) still runs in a new interpreter of its own, so that an import
that fails on its own is seen too. ``tests/test_preloaded.py`` holds the helper to these words.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

#: What the helper interpreter imports once (each fork finds them imported).
PRELOAD = ("numpy", "torch", "tensordict", "gymnasium", "rlcollect")

# The helper: imports PRELOAD, then for each request line forks a child that runs it, answers the
# child's pid, waits for it and answers its exit status. It is single-threaded, so a fork is safe.
_SERVER = r"""
import json, os, sys
requests, replies = os.fdopen(0, "r"), os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # what the imports might print goes to stderr, not into the answers
before = dict(os.environ)
for name in json.loads(sys.argv[1]):
    __import__(name)
# what the imports wrote into the environment (Gymnasium hides pygame's banner so): a new
# interpreter's imports write it over the environment it was given, so each fork does too
imported = {key: value for key, value in os.environ.items() if before.get(key) != value}

def child(request):
    import atexit, runpy, traceback
    code = 1
    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(os.open(request["stdout"], os.O_WRONLY), 1)
        os.dup2(os.open(request["stderr"], os.O_WRONLY), 2)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.update(imported)
        import numpy
        numpy.random.seed()  # a new process seeds it from the OS: so does each fork
        args = request["args"]
        if args[0] == "-c":
            import types
            sys.argv, sys.path[0] = ["-c", *args[2:]], ""
            sys.modules["__main__"] = main = types.ModuleType("__main__")
            exec(compile(args[1], "<string>", "exec"), main.__dict__)
        elif args[0] == "-m":
            sys.argv, sys.path[0] = [args[1], *args[2:]], os.getcwd()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv, sys.path[0] = list(args), os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
    except BaseException as error:  # the traceback from the code's own frames, as a new interpreter's
        trace = error.__traceback__
        while trace is not None and (trace.tb_frame.f_globals is globals()
                                     or trace.tb_frame.f_globals.get("__name__") == "runpy"):
            trace = trace.tb_next
        traceback.print_exception(type(error), error, trace)
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)

for line in requests:
    request = json.loads(line)
    replies.flush()
    pid = os.fork()
    if pid == 0:
        replies.close()
        child(request)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
"""


class Preloaded:
    """A helper interpreter with :data:`PRELOAD` imported; :meth:`run` runs one script in a fork
    of it. Started on first use; :meth:`close` (or leaving a ``with`` block) ends it."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD) -> None:
        self._preload = preload
        self._server: subprocess.Popen[str] | None = None
        self._pending = b""  # what the helper answered beyond the last whole line read

    def run(self, args: list[str], cwd: str | Path, env: dict[str, str] | None = None,
            timeout: float = 170.0) -> subprocess.CompletedProcess[str]:
        """As ``subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=timeout)``: ``args`` is a script and its arguments, or ``-m module ...``
        or ``-c code ...``. On a time-out the run's whole process group is killed and
        :class:`subprocess.TimeoutExpired` raised."""
        server = self._started()
        with tempfile.TemporaryDirectory(prefix="rlcollect-preloaded-") as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            out.touch()
            err.touch()
            request = {"args": list(args), "cwd": str(cwd), "env": dict(os.environ if env is None else env),
                       "stdout": str(out), "stderr": str(err)}
            assert server.stdin is not None
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            pid = int(self._reply(60.0)["pid"])
            try:
                status = int(self._reply(timeout)["status"])
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):  # it may have ended meanwhile
                    os.killpg(pid, signal.SIGKILL)
                self._reply(30.0)
                raise subprocess.TimeoutExpired([sys.executable, *args], timeout, out.read_text(),
                                                err.read_text()) from None
            return subprocess.CompletedProcess([sys.executable, *args], status, out.read_text(),
                                               err.read_text())

    def _started(self) -> subprocess.Popen[str]:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen([sys.executable, "-c", _SERVER, json.dumps(self._preload)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self._pending = b""
        return self._server

    def _reply(self, timeout: float) -> dict[str, int]:
        """The helper's next answer line, waiting at most ``timeout`` seconds for it."""
        assert self._server is not None and self._server.stdout is not None
        fd = self._server.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired("preloaded run", timeout)
            more = os.read(fd, 4096)
            if not more:
                code = self._server.wait(timeout=10)
                raise RuntimeError(f"the preloaded helper interpreter exited with code {code}")
            self._pending += more
        line, self._pending = self._pending.split(b"\n", 1)
        answer: dict[str, int] = json.loads(line)
        return answer

    def close(self) -> None:
        """End the helper interpreter (it exits when its requests end)."""
        if self._server is not None:
            assert self._server.stdin is not None
            self._server.stdin.close()
            try:
                self._server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            self._server = None

    def __enter__(self) -> Preloaded:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
