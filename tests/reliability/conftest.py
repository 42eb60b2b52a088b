"""Every test under tests/reliability/ but the soak carries the ``reliability`` marker: run the
fault matrix, the bad-input table and the replay faults apart with ``pytest -m reliability``, the
soak with ``pytest -m soak``."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        in_folder = "tests/reliability/" in str(item.path).replace("\\", "/")
        if in_folder and item.get_closest_marker("soak") is None:
            item.add_marker(pytest.mark.reliability)
