"""Imported first by the forkserver that starts worker processes: it ignores SIGINT from then on,
and so does every worker it forks (the forkserver restores its own handlers in each child).

A Ctrl-C in a terminal reaches the whole process group; only the user's process should see it (one
``KeyboardInterrupt``, which shuts the workers down), not each worker with a traceback of its own.
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
