"""The fast tier: the pure core, no processes and no services. Everything here is marked `unit`."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/unit/" in str(item.path):
            item.add_marker(pytest.mark.unit)
