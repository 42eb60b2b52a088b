"""The missing main-module guard, said once and at once.

With the ``spawn`` and ``forkserver`` start methods a worker process imports your script before it
runs anything of rlcollect's; a script that builds a collector at its top level (not under
``if __name__ == "__main__":``) would build one in every worker, each starting workers of its own.
Python stops that deep in ``multiprocessing`` with a long traceback per worker, which rlcollect
used to retry. Now the collector being built in a worker that is importing your script ends that
worker at once with :data:`EXIT_UNGUARDED`, silently, and the parent's error says what to do.

Example:
    >>> print(exit_cause(EXIT_UNGUARDED).splitlines()[0])
    the worker process ran your script's top level again, which builds a collector.
    >>> exit_cause(1)
    'process exited with code 1'
"""

from __future__ import annotations

import multiprocessing
import os

__all__ = ["EXIT_UNGUARDED", "Unrecoverable", "exit_cause", "refuse_unguarded_main"]

#: The exit status of an rlcollect worker that found itself building a collector while importing
#: your script (an unused one: Python's own are 0, 1, 2 and signals' are negative)
EXIT_UNGUARDED = 86

UNGUARDED = (
    "the worker process ran your script's top level again, which builds a collector.\n"
    "With the 'spawn' and 'forkserver' start methods every worker process imports your script "
    "first, so the code that builds and uses a collector must sit under the main-module guard:\n\n"
    "    if __name__ == \"__main__\":\n"
    "        main()\n\n"
    "(functions and classes the workers need, such as env factories, stay at the top level)"
)


class Unrecoverable(str):
    """Why a worker failed, where a restart would fail the same way: raised at once."""


def exit_cause(exitcode: int | None) -> str:
    """What a worker process's exit status says (an :class:`Unrecoverable` for the missing guard)."""
    if exitcode == EXIT_UNGUARDED:
        return Unrecoverable(UNGUARDED)
    return f"process exited with code {exitcode}"


def refuse_unguarded_main() -> None:
    """Called as every collector is built. In a process that is importing the main script to start
    (``multiprocessing`` sets ``_inheriting`` then): an rlcollect worker exits at once with
    :data:`EXIT_UNGUARDED` (its parent says why); another library's process gets the same words as
    a ``RuntimeError``."""
    process = multiprocessing.current_process()
    if not getattr(process, "_inheriting", False):
        return
    if process.name.startswith("rlcollect-worker-"):
        os._exit(EXIT_UNGUARDED)
    raise RuntimeError(f"rlcollect: {UNGUARDED}")
