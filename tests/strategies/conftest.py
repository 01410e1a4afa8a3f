"""Flower's Message needs a TaskIdentity outside a runtime."""

import pytest

from tests.strategies._flower import set_task_identity


@pytest.fixture(autouse=True)
def flwr_task_identity():
    set_task_identity()
