"""Fixtures several test packages share."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# TorchRL's vendored collector tests run apart (python -m tests.torchrl_suite.run), not in the default run
collect_ignore = [] if os.environ.get("RLCOLLECT_TORCHRL_SUITE") else ["torchrl_suite"]


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """One local Ray (2 CPUs) for a test module; the collectors use it and leave it running."""
    ray = pytest.importorskip("ray", reason="RayCollector needs ray: pip install rlcollect[ray]")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on a local Ray (the ``ray_session`` fixture) carry the ``ray`` marker: they run apart."""
    for item in items:
        if "ray_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)
