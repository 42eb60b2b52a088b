"""Where a warning should point (the first line outside rlcollect), and whether an error came
from code outside it (your policy's, your env's).

A warning names the file and line that made it; for one about what you passed or did (an option,
a deprecated call, a policy edited in place) that is your line, however deep in the package the
check runs. Python 3.12's ``skip_file_prefixes`` does this; this works on 3.10 too.

Examples:
    >>> import warnings
    >>> def check() -> None:
    ...     warnings.warn("look here", UserWarning, stacklevel=outside_stacklevel())
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     check()
    >>> caught[0].lineno > 0  # this doctest's line: the helper is outside rlcollect's files
    True
"""

from __future__ import annotations

import os
import sys
from types import FrameType, TracebackType

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def outside_stacklevel() -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called by the caller of this function,
    name the first frame outside the rlcollect package."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def raised_outside(error: BaseException) -> bool:
    """Whether the innermost frame of ``error``'s traceback is outside the rlcollect package
    (your code, or a library it called), not one of rlcollect's own checks.

    Examples:
        >>> try:
        ...     int("x")
        ... except ValueError as error:
        ...     raised_outside(error)
        True
    """
    tb: TracebackType | None = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE)
