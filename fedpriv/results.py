"""The run directory (DESIGN.md §6) and what fills it round by round: plain file IO, no Flower.

``RunDirectory`` holds the resolved config (``config.toml``), ``metrics.jsonl`` (one line per
finished round, fsynced), ``checkpoint.npz`` + ``ledger.json`` (the model and the privacy ledger
after the last finished round) and ``summary.json``. :class:`RoundSink` is what an engine hands
each finished round to; :func:`ldp_sgd_summary` builds ``summary.json`` of a federated LDP-SGD run.

Every runtime writes the same directory through these: the in-process engines and the Flower
simulation engine (``simulations.runner``) and the deployed ServerApp (``strategies.server_app``
with the ``run-dir`` key), which is why this module lives in ``fedpriv/`` (both sides may import
it) and never imports Flower.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from fedpriv.accounting import PrivacyLedger, RoundSpend
from fedpriv.config import RunConfig
from fedpriv.federated.local import privacy_scope
from fedpriv.federated.server_analysis import ANALYSIS_PREFIXES
from fedpriv.mechanisms import GaussianMechanism, gaussian_sigma
from fedpriv.perturbation import Coordinatewise, GeoDP, LDPVec, Perturbation

__all__ = ["RoundSink", "RunDirectory", "json_safe", "ldp_sgd_summary", "make_ledger", "round_record",
           "round_spend", "versions"]


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


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    """Versions of the interpreter and the libraries a result depends on (read from package metadata)."""
    import fedpriv

    return {"python": platform.python_version(), "numpy": np.__version__, "torch": _version("torch"),
            "flwr": _version("flwr"), "fedpriv": fedpriv.__version__}


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

    @classmethod
    def at(cls, path: Path, config: RunConfig) -> RunDirectory:
        """The run directory exactly at ``path``: opened if it holds ``config.toml``, else created with it."""
        path = Path(path)
        if (path / "config.toml").is_file():
            return cls(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.toml").write_text(tomli_w.dumps(config.to_dict()))
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

    def truncate_rounds(self, last_round: int) -> None:
        """Drop recorded rounds after ``last_round`` (a crash between a round's line and its checkpoint)."""
        kept = [r for r in self.rounds() if int(r["round"]) <= last_round]
        tmp = self.path / "metrics.tmp.jsonl"
        tmp.write_text("".join(json.dumps(json_safe(r)) + "\n" for r in kept))
        os.replace(tmp, self.path / "metrics.jsonl")

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
        """Write ``payload`` as indented JSON (atomically: a reader never sees half a file)."""
        path = self.path / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(json.dumps(json_safe(payload), indent=2))
        os.replace(tmp, path)
        return path


# ---------------------------------------------------------------------- privacy of a round


def make_ledger(config: RunConfig, perturbation: Perturbation) -> PrivacyLedger:
    """An empty ledger of the right kind for this run."""
    if isinstance(perturbation, GeoDP):
        sigmas = {mode: perturbation.effective_sigma(mode) for mode in ("conservative", "paper")}
        return PrivacyLedger(kind="geodp", num_clients=config.num_clients, delta=config.delta,
                             batch_size=config.batch_size, geodp_sigmas=sigmas)
    kind = "none" if config.perturbation == "none" else "ldp"
    return PrivacyLedger(kind=kind, num_clients=config.num_clients, delta=config.delta)


def _noise_multiplier(config: RunConfig, perturbation: Perturbation, d: int) -> float | None:
    """z = σ/Δ when one release is a single Gaussian mechanism, else None (basic composition only)."""
    if config.mechanism != "gaussian":
        return None
    if isinstance(perturbation, Coordinatewise) and perturbation.budget_mode == "split":
        mech = perturbation.mechanism_for(d)
        if not isinstance(mech, GaussianMechanism):
            raise TypeError(f"mechanism 'gaussian' built a {type(mech).__name__}, expected GaussianMechanism")
        return float(mech.sigma) / mech.sensitivity
    if isinstance(perturbation, LDPVec) and perturbation.partition == "sensitivity" and perturbation.magnitude != "perturb":
        calibration = perturbation.mechanism_params.get("calibration", "classical")
        return float(gaussian_sigma(perturbation.epsilon, perturbation.delta, 1.0, calibration))
    return None


def round_spend(config: RunConfig, perturbation: Perturbation, d: int, server_round: int) -> RoundSpend:
    """What each participating client spends in one round under this configuration."""
    g = perturbation.guarantee_for(d)
    releases = config.local_steps if config.noise_schedule == "every_step" else 1
    return RoundSpend(server_round=server_round, epsilon=g.epsilon, delta=g.delta, releases=releases,
                      holds=g.holds, noise_multiplier=_noise_multiplier(config, perturbation, d))


# ---------------------------------------------------------------------- rounds and summary


def round_record(server_round: int, metrics: Mapping[str, Any], num_examples: Mapping[int, int],
                 seconds: float) -> dict[str, Any]:
    """A round's ``metrics.jsonl`` record from a Flower strategy's per-round metrics (the fast engine's keys)."""
    ids = [int(c) for c in metrics.get("client-ids", [])]
    return {
        "round": server_round,
        "clients": len(ids),
        "client-ids": ids,
        "num-examples": {c: int(num_examples[c]) for c in ids},
        "failed": int(metrics.get("failed", 0)),
        "rejected": int(metrics.get("rejected", 0)),
        "failed-reasons": list(metrics.get("failed-reasons", [])),
        "rejected-reasons": list(metrics.get("rejected-reasons", [])),
        "train-loss": float(metrics.get("train_loss", metrics.get("train-loss", float("nan")))),
        **{k: float(v) for k, v in metrics.items() if k.startswith(ANALYSIS_PREFIXES)},
        "test-accuracy": float(metrics["test-accuracy"]),
        "test-loss": float(metrics["test-loss"]),
        "seconds": seconds,
    }


class RoundSink:
    """Receives finished rounds: charges the ledger, appends to metrics.jsonl, checkpoints, reports progress."""

    def __init__(self, config: RunConfig, run_dir: RunDirectory, perturbation: Perturbation, dim: int,
                 on_progress: Callable[[dict[str, Any]], None] | None = None,
                 ledger_state: dict[str, Any] | None = None) -> None:
        self.config, self.dir, self.perturbation, self.dim = config, run_dir, perturbation, int(dim)
        self.on_progress = on_progress
        self.ledger = (PrivacyLedger.from_state_dict(ledger_state) if ledger_state
                       else make_ledger(config, perturbation))
        self.records: list[dict[str, Any]] = run_dir.rounds()
        self.params: np.ndarray | None = None

    def __call__(self, server_round: int, params: np.ndarray, record: dict[str, Any]) -> None:
        spend = round_spend(self.config, self.perturbation, self.dim, server_round)
        self.ledger.record(spend, record.get("client-ids", []),
                           {int(k): v for k, v in record.get("num-examples", {}).items()})
        record = {**record, "epsilon-round": spend.epsilon * spend.releases,
                  "epsilon-total": self.ledger.running_max_epsilon(), "privacy-claim-holds": spend.holds}
        self.dir.append_round(record)
        self.dir.save_checkpoint(server_round, params, self.ledger.state_dict())
        self.records.append(record)
        self.params = params
        if self.on_progress is not None:
            self.on_progress(record)


def ldp_sgd_summary(config: RunConfig, sink: RoundSink, *, engine: str, error: str | None,
                    seconds: float, status: str | None = None) -> dict[str, Any]:
    """``summary.json`` of a federated LDP-SGD run: status, final metrics, privacy ledger, timings, versions."""
    records = sink.records
    return {
        "engine": engine,
        "status": status or ("failed" if error else "finished"),
        "error": error,
        "rounds_finished": len(records),
        "final": {k: v for k, v in (records[-1] if records else {}).items()
                  if k.startswith("test-") or k == "train-loss"},
        "privacy": sink.ledger.totals(),
        "privacy_scope": privacy_scope(config),
        "perturbation": sink.perturbation.config(),
        "num_params": sink.dim,
        "seconds": seconds,
        "seconds_per_round": (sum(r.get("seconds", 0.0) for r in records) / len(records) if records else None),
        "config_digest": config.digest(),
        "config": config.to_dict(),
        "versions": versions(),
    }
