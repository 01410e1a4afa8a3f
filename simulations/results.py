"""The run directory (DESIGN.md §6): resolved config, metrics.jsonl, summary.json, ledger, plots.

Rounds are appended to ``metrics.jsonl`` and checkpointed (``checkpoint.npz``) as they finish, so a
run that stops part-way leaves its finished rounds on disk and can resume from the last one.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from fedpriv.config import RunConfig

__all__ = ["RunDirectory", "json_safe", "versions"]


def json_safe(value: Any) -> Any:
    """Replace non-finite floats by strings ("inf", "nan") so the file stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return value


def versions() -> dict[str, str]:
    """Versions of the interpreter and the libraries a result depends on."""
    import flwr
    import torch

    import fedpriv

    return {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
            "flwr": flwr.__version__, "fedpriv": fedpriv.__version__}


@dataclass
class RunDirectory:
    """One run's directory; create with :meth:`create` or reopen with :meth:`open` to resume."""

    path: Path

    @classmethod
    def create(cls, root: Path, config: RunConfig, name: str | None = None) -> RunDirectory:
        """A fresh directory ``root/<name or timestamp>-<config digest>`` holding ``config.toml``."""
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(root) / f"{name or stamp}-{config.digest()}"
        suffix = 1
        while path.exists():
            suffix += 1
            path = Path(root) / f"{name or stamp}-{config.digest()}-{suffix}"
        path.mkdir(parents=True)
        (path / "config.toml").write_text(tomli_w.dumps(config.to_dict()))
        return cls(path)

    @classmethod
    def open(cls, path: Path) -> RunDirectory:
        """An existing run directory (for resuming)."""
        path = Path(path)
        if not (path / "config.toml").is_file():
            raise FileNotFoundError(f"run directory must contain config.toml, none in {path}")
        return cls(path)

    def config(self) -> RunConfig:
        """The resolved configuration the run was started with."""
        return RunConfig.from_toml(self.path / "config.toml")

    # ------------------------------------------------------------------ per round
    def append_round(self, record: dict[str, Any]) -> None:
        """Append one round's metrics as a JSON line (flushed and fsynced: it survives a crash)."""
        with open(self.path / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps(json_safe(record)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def rounds(self) -> list[dict[str, Any]]:
        """Every finished round recorded so far."""
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def save_checkpoint(self, server_round: int, params: np.ndarray, ledger_state: dict[str, Any]) -> None:
        """Atomically store the global model after ``server_round`` and the ledger."""
        tmp = self.path / "checkpoint.tmp.npz"
        np.savez(tmp, params=params, server_round=server_round)
        os.replace(tmp, self.path / "checkpoint.npz")
        self.write_json("ledger.json", ledger_state)

    def load_checkpoint(self) -> tuple[int, np.ndarray, dict[str, Any]] | None:
        """The last checkpoint (round, params, ledger state), or None."""
        path = self.path / "checkpoint.npz"
        if not path.exists():
            return None
        with np.load(path) as data:
            return int(data["server_round"]), data["params"].copy(), json.loads((self.path / "ledger.json").read_text())

    # ------------------------------------------------------------------ end of run
    def write_json(self, name: str, payload: dict[str, Any]) -> Path:
        """Write ``payload`` as indented JSON."""
        path = self.path / name
        path.write_text(json.dumps(json_safe(payload), indent=2))
        return path
