"""What every benchmark script shares: the machine description and writing its JSON result.

A run writes ``benchmarks/out/<name>.json`` (ignored by git); ``--record`` writes the tracked
``benchmarks/results/<name>.json`` instead, the numbers the README quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch

RESULTS = Path(__file__).parent / "results"
OUT = Path(__file__).parent / "out"


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


def add_record_option(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--record``: write the tracked benchmarks/results/ file instead of benchmarks/out/."""
    parser.add_argument("--record", action="store_true",
                        help="write benchmarks/results/<name>.json (tracked) instead of benchmarks/out/<name>.json")
    return parser


def write_result(record: bool, name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` plus the machine description to benchmarks/out/<name>.json, or results/ when ``record``."""
    folder = RESULTS if record else OUT
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({**payload, "machine": machine_info()}, indent=2))
    print(f"wrote {path}")
    return path
