"""What every benchmark script shares: the machine description and writing its JSON result."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch

RESULTS = Path(__file__).parent / "results"


def machine_info() -> dict[str, Any]:
    """Platform, interpreter, library versions and thread counts of this run."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
    }


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` plus the machine description to ``benchmarks/results/<name>.json``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({**payload, "machine": machine_info()}, indent=2))
    print(f"wrote {path}")
    return path
