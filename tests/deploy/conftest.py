"""Flower's Message needs a TaskIdentity outside a runtime (shared/notes/flower.md §5)."""

import pytest

from tests.strategies._flower import set_task_identity


@pytest.fixture(autouse=True)
def flwr_task_identity():
    set_task_identity()
