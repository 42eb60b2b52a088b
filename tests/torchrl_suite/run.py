"""Run TorchRL's vendored collector tests against ``rlcollect.torchrl``; print what passes.

Usage: ``python -m tests.torchrl_suite.run [--budget SECONDS] [--floor P] [pytest arguments]``

Prints ``torchrl suite: P passed of N`` (N: every test case, all parametrizations) and writes the
outcome of each case to ``tests/torchrl_suite/outcomes.json`` (or ``$RLCOLLECT_TORCHRL_OUTCOMES``).
The cases listed in :data:`INTERNALS` (TorchRL internals no user touches) are skipped, with
their reason, and counted as ``internal``. It exits 1 when fewer than ``--floor`` cases pass
(default :data:`FLOOR`, the count recorded last, less a margin for the suite's own flaky cases;
``--floor 0`` only measures), else 0. Each case may
take ``--timeout`` seconds (default 60); cases not started within ``--budget`` seconds (default
780) are counted as not run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
#: The fewest passing cases CI accepts: the count recorded on this machine, less a few for the
#: suite's timing-dependent cases. Raise it as more of TorchRL's behaviour lands.
# 375 passed on 2026-12-07 in a full run, 376 when its timing-dependent case passes (the legacy
# updater case is no longer skipped as an internal: it passes); 375 on 2026-12-06 (373 when two
# timing-dependent cases fail)
FLOOR = 370


#: Cases that test TorchRL internals no user touches, skipped with the reason (test ids; ``*``
#: matches anything). Every one of them passes on TorchRL itself (measured 2026-12-02 and
#: 2026-12-03): the share of TorchRL's passing cases is counted without them.
INTERNALS = {
    "*TestAsyncCollection::test_start_update_policy[*-MultiAsyncCollector-*":
        "asserts the private _weight_sync_schemes holds TorchRL's own scheme classes",
    "*TestAsyncCollection::test_start_update_policy[*-MultiSyncCollector-*":
        "asserts the private _weight_sync_schemes holds TorchRL's own scheme classes",
    "*TestCollectorGeneric::test_concurrent_collector_consistency[*":
        "asserts the private _use_buffers (rlcollect always preallocates its buffers)",
    "*TestAutoWrap::test_auto_wrap_modules[device0-*-Collector-1]": "reads the private _wrapped_policy",
    "*TestCollectorGeneric::test_collector_reloading[*":
        "compares the private _frames and _iter counters, and TorchRL's own state_dict layout (traj_pool)",
    "*TestCollectorProfiling::test_enable_profile_installs_profiler_hook_single":
        "asserts the hook is TorchRL's private _ProfilerHook class",
    "*::test_missing_weight_update_path_raises": "calls the private BaseCollector._maybe_fallback_update",
    "*TestPreemptiveThreshold::test_sync_collector_interruptor_mechanism[*":
        "drives a collector with TorchRL's internal _Interruptor object",
    "*TestCollectorRB::test_collector_with_rb_uses_lazy_stack[*":
        "asserts TorchRL's internal write path (that TensorDictBase.update_at_ is called)",
    "*TestTrajsPerBatch::test_reset_flushes_assembly_state": "reads the private _traj_assembly queues",
    "*TestCollectorRB::test_runner_managed_replay_buffer_returns_uncloned_rollout":
        "sets the private class attribute _ignore_rb",
    "*TestCollectorGeneric::test_backend_dispatch[*-torchrl.collectors._multi_base.MultiCollector]":
        "patches the internal class torchrl.collectors._multi_base.MultiCollector",
}


def internal(nodeid: str) -> str | None:
    """The reason a case is skipped as a TorchRL internal, or ``None``."""
    for pattern, reason in INTERNALS.items():
        if re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), nodeid):
            return reason
    return None


#: Where the workers read the time after which no case starts (``time.time()``)
DEADLINE = "RLCOLLECT_TORCHRL_DEADLINE"
SKIPPED_INTERNAL, SKIPPED_LATE = "a TorchRL internal", "the suite's time budget is spent"


def pytest_runtest_setup(item: Any) -> None:
    """In every process that runs cases (this module is a plugin, ``-p tests.torchrl_suite.run``,
    which pytest-xdist's workers load too): TorchRL's internals skipped, and the cases that would
    start past the deadline."""
    reason = internal(item.nodeid)
    if reason is not None:
        pytest.skip(f"{SKIPPED_INTERNAL}: {reason}")
    if time.time() > float(os.environ.get(DEADLINE, "inf")):
        pytest.skip(SKIPPED_LATE)


class Tally:
    """Outcome per test case, from the reports (those of pytest-xdist's workers too)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.collected = 0

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        self.collected = len(items)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected = max(self.collected, len(ids))

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.skipped and report.when == "setup":
            text = str(report.longrepr)
            if SKIPPED_INTERNAL in text or SKIPPED_LATE in text:
                self.outcomes[report.nodeid] = "internal" if SKIPPED_INTERNAL in text else "not run"
                return
        if report.when == "call" or report.outcome != "passed":
            outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
            if report.nodeid not in self.outcomes or outcome != "passed":
                self.outcomes[report.nodeid] = outcome


def main(argv: list[str]) -> int:
    budget, floor = 780.0, FLOOR
    while argv[:1] in (["--budget"], ["--floor"]):
        if argv[0] == "--budget":
            budget = float(argv[1])
        else:
            floor = int(argv[1])
        argv = argv[2:]
    tally = Tally()
    os.environ[DEADLINE] = str(time.time() + budget)
    os.environ["RLCOLLECT_TORCHRL_SUITE"] = "1"  # tests/conftest.py leaves the suite out otherwise
    # the script tests run `python -c ...`: the interpreter running the suite, with TorchRL
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    start = time.monotonic()
    # spread over the cores as the default run is (tests/conftest.py picks the number of workers)
    arguments = [str(HERE / "test_collectors.py"), "-q", "-p", "no:cacheprovider",
                 "-p", "tests.torchrl_suite.run",
                 "--timeout", "60", "-o", "addopts=", "-n", "auto", "--dist", "worksteal", *argv]
    pytest.main(arguments, plugins=[tally])
    counts = Counter(tally.outcomes.values())
    output = Path(os.environ.get("RLCOLLECT_TORCHRL_OUTCOMES", HERE / "outcomes.json"))
    output.write_text(json.dumps(dict(sorted(tally.outcomes.items())), indent=0) + "\n")
    details = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))
    print(f"torchrl suite: {counts['passed']} passed of {tally.collected} "
          f"({details}; {time.monotonic() - start:.0f} s)")
    if counts["passed"] < floor:
        print(f"torchrl suite: {counts['passed']} passed, fewer than the floor of {floor}: something that "
              "worked broke (see outcomes.json; compare with the last run)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
