"""The fault matrix and the replay faults carry the ``reliability`` marker: they run apart, with
``pytest -m reliability`` (``.ci/run`` runs them as their own step). The bad-input table is part of
the default run; the soak has its own marker (``pytest -m soak``)."""

from __future__ import annotations

import pytest

_DEFAULT_RUN = ("test_bad_input.py", "test_bad_state.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        in_folder = "tests/reliability/" in str(item.path).replace("\\", "/")
        if in_folder and item.path.name not in _DEFAULT_RUN and item.get_closest_marker("soak") is None:
            item.add_marker(pytest.mark.reliability)
