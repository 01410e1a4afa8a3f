"""fedpriv._lazy: a package's re-exports load on first use and are the same objects as their modules'."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import fedpriv.data
import fedpriv.secagg
from fedpriv.secagg.protocol import SecAggServer

ROOT = Path(__file__).resolve().parents[2]


def test_a_re_export_is_the_module_attribute() -> None:
    assert fedpriv.secagg.SecAggServer is SecAggServer
    assert "SecAggServer" in dir(fedpriv.secagg)


def test_an_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="fedpriv.secagg.*no_such_name"):
        fedpriv.secagg.no_such_name  # noqa: B018


@pytest.mark.subprocess
def test_a_name_shared_with_a_submodule_is_the_function() -> None:
    """``partition`` is both fedpriv.data's submodule and the function it re-exports: the function wins,
    whichever is imported first (checked in a fresh interpreter, where nothing was imported before)."""
    assert callable(fedpriv.data.partition)
    code = ("import fedpriv.data.partition, fedpriv.federated.aggregate\nimport fedpriv.data, fedpriv.federated\n"
            "print(type(fedpriv.data.partition).__name__, type(fedpriv.federated.aggregate).__name__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=True)
    assert done.stdout.split() == ["function", "function"]
