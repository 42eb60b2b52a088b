"""Write ``test_collectors.py`` here from TorchRL's own, with its collector imports pointed at
``rlcollect.torchrl``; nothing else changes.

Usage: ``python -m tests.torchrl_suite.vendor PATH/TO/torchrl/test/test_collectors.py``

The rewrite is mechanical: each TorchRL collector name that :mod:`rlcollect.torchrl` exports is
imported from there instead of ``torchrl.collectors`` (in the module's imports and in the script a
test writes for a subprocess); every other import (TorchRL's envs, specs, modules, testing mocks,
and the collectors rlcollect does not have yet, such as ``DistributedCollector``) stays TorchRL's.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import rlcollect.torchrl

HERE = Path(__file__).resolve().parent
OURS = set(rlcollect.torchrl.__all__)
NOTE = (
    "# Vendored by tests/torchrl_suite/vendor.py: the collector names rlcollect.torchrl exports are\n"
    "# imported from there; everything else is TorchRL's, unchanged.\n"
)
_BLOCK = re.compile(r"^from torchrl\.collectors import \(\n(?P<names>(?:    \w+,\n)+)\)\n", re.M)
_RAY = "from torchrl.collectors.distributed.ray import _has_ray, RayCollector\n"
_SCRIPT = "from torchrl.collectors import {collector_cls}, RandomPolicy\n"


def rewrite(source: str) -> str:
    """TorchRL's test module ``source`` with its collector imports rewritten (see the module doc)."""
    block = _BLOCK.search(source)
    if block is None or _RAY not in source or _SCRIPT not in source:
        raise ValueError("the imports to rewrite were not found: not TorchRL 0.14's test_collectors.py?")
    names = re.findall(r"\w+", block["names"])
    theirs, ours = [n for n in names if n not in OURS], [n for n in names if n in OURS]
    lines = [f"from torchrl.collectors import {', '.join(theirs)}\n"] if theirs else []
    lines.append("from rlcollect.torchrl import (\n" + "".join(f"    {n},\n" for n in ours) + ")\n")
    source = source[: block.start()] + "".join(lines) + source[block.end() :]
    source = source.replace(_RAY, "from torchrl.collectors.distributed.ray import _has_ray\n"
                                  "from rlcollect.torchrl import RayCollector\n")
    source = source.replace(_SCRIPT, "from rlcollect.torchrl import {collector_cls}\n"
                                     "from torchrl.collectors import RandomPolicy\n")
    header_end = source.index("from __future__")
    return source[:header_end] + NOTE + source[header_end:]


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    (HERE / "test_collectors.py").write_text(rewrite(Path(argv[0]).read_text()))


if __name__ == "__main__":
    main(sys.argv[1:])
