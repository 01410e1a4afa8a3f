"""Shared fixtures of the MF tests."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture
def record_outputs(monkeypatch: pytest.MonkeyPatch) -> Callable[[ModuleType, str], list[Any]]:
    """``record(module, name)``: patch ``module.name`` to also append each return value to the list it returns."""

    def record(module: ModuleType, name: str) -> list[Any]:
        """Wrap ``module.name`` for this test; the list of its return values, in call order."""
        outputs: list[Any] = []
        original = getattr(module, name)

        def recording(*args: Any, **kwargs: Any) -> Any:
            """Call the original and keep its return value."""
            out = original(*args, **kwargs)
            outputs.append(out)
            return out

        monkeypatch.setattr(module, name, recording)
        return outputs

    return record
