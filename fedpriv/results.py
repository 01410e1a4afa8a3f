"""What fills a run directory (:mod:`fedpriv.rundir`) round by round: plain file IO, no Flower.

:class:`RoundSink` is what a federated LDP-SGD engine hands each finished round to: it charges the
privacy ledger and commits the round (model, ledger, metrics line) in one atomic commit;
:func:`ldp_sgd_summary` builds ``summary.json``; :func:`load_config` reads a run directory's config.

Every runtime writes the same directory through these: the in-process engines and the Flower
simulation engine (``simulations.runner``) and the deployed ServerApp (``strategies.server_app``
with the ``run-dir`` key), which is why this module lives in ``fedpriv/`` (both sides may import
it) and never imports Flower.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

import numpy as np

from fedpriv.accounting import PrivacyLedger, RoundSpend
from fedpriv.config import RunConfig
from fedpriv.federated.local import privacy_scope
from fedpriv.federated.server_analysis import ANALYSIS_PREFIXES
from fedpriv.mechanisms import GaussianMechanism, gaussian_sigma
from fedpriv.perturbation import Coordinatewise, GeoDP, LDPVec, Perturbation
from fedpriv.rundir import Committed, RunDirectory, RunDirectoryError, json_safe

__all__ = ["RoundSink", "RunDirectory", "json_safe", "ldp_sgd_summary", "load_config", "make_ledger",
           "round_record", "round_spend", "versions"]


def load_config(run_dir: RunDirectory) -> RunConfig:
    """The configuration a run directory was started with, or one line saying why it cannot be used."""
    try:
        return RunConfig.from_mapping(run_dir.config_values())
    except ValueError as exc:
        raise RunDirectoryError(f"{run_dir.path / 'config.toml'} is not a valid configuration of this fedpriv "
                                f"({exc}): start a new run") from None


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


def round_spend(config: RunConfig, perturbation: Perturbation, d: int, server_round: int, *,
                claims_held: bool = True) -> RoundSpend:
    """What each participating client spends in one round under this configuration.

    The round's claim holds when the perturbation's guarantee holds for this configuration and
    ``claims_held``: no release of the round voided it through its data (the round record's
    ``privacy-claim``; e.g. LDPVec ``magnitude="keep"`` released the exact norm of an update
    shorter than ``clip-norm``, while the LDPVec theorem assumes every released norm is the same).
    ``note`` says why it does not.
    """
    g = perturbation.guarantee_for(d)
    releases = config.local_steps if config.noise_schedule == "every_step" else 1
    reasons = [g.note] if not g.holds and g.note else []
    if not g.holds and not g.note:
        reasons.append(f"the {perturbation.name} guarantee does not hold for this configuration")
    if not claims_held:
        reasons.append("a release of this round voided its guarantee through its data: " + (
            "magnitude='keep' released the exact norm of an update shorter than clip-norm"
            if getattr(perturbation, "magnitude", None) == "keep" else "its input fell outside what the guarantee assumes"))
    return RoundSpend(server_round=server_round, epsilon=g.epsilon, delta=g.delta, releases=releases,
                      holds=g.holds and claims_held, noise_multiplier=_noise_multiplier(config, perturbation, d),
                      note="; ".join(reasons))


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
        "privacy-claim": float(metrics.get("privacy-claim", 1.0)),
        **{k: float(v) for k, v in metrics.items() if k.startswith(ANALYSIS_PREFIXES)},
        "test-accuracy": float(metrics["test-accuracy"]),
        "test-loss": float(metrics["test-loss"]),
        "seconds": seconds,
    }


class RoundSink:
    """Receives finished rounds: charges the ledger, commits the round (model, ledger, metrics line), reports progress.

    ``committed`` (from :meth:`RunDirectory.recover`) restores the records, the model and the ledger
    of a resumed run; its model must have ``dim`` parameters.
    """

    def __init__(self, config: RunConfig, run_dir: RunDirectory, perturbation: Perturbation, dim: int,
                 on_progress: Callable[[dict[str, Any]], None] | None = None,
                 committed: Committed | None = None) -> None:
        self.config, self.dir, self.perturbation, self.dim = config, run_dir, perturbation, int(dim)
        self.on_progress = on_progress
        committed = committed or Committed()
        self.ledger = (PrivacyLedger.from_state_dict(committed.ledger) if committed.ledger
                       else make_ledger(config, perturbation))
        self.records: list[dict[str, Any]] = list(committed.records)
        self.params: np.ndarray | None = committed.arrays.get("params")
        if committed.round and (self.params is None or self.params.size != self.dim):
            found = "no model" if self.params is None else f"a model of {self.params.size} parameters"
            raise RunDirectoryError(f"{run_dir.path / 'checkpoint.npz'} holds {found}, the run's model has {self.dim}: "
                                    "it does not belong to this run; start a new run")
        self.error: BaseException | None = None

    @property
    def last_round(self) -> int:
        """The last committed round (0 before the first)."""
        return int(self.records[-1]["round"]) if self.records else 0

    def __call__(self, server_round: int, params: np.ndarray, record: dict[str, Any]) -> None:
        try:
            spend = round_spend(self.config, self.perturbation, self.dim, server_round,
                                claims_held=record.get("privacy-claim", 1.0) != 0.0)
            self.ledger.record(spend, record.get("client-ids", []),
                               {int(k): v for k, v in record.get("num-examples", {}).items()})
            record = {**record, "epsilon-round": spend.epsilon * spend.releases,
                      "epsilon-total": self.ledger.running_max_epsilon(), "privacy-claim-holds": spend.holds,
                      **({} if spend.holds else {"privacy-caveat": spend.note})}
            record = self.dir.commit(record, arrays={"params": np.asarray(params)}, ledger=self.ledger.state_dict())
        except BaseException as exc:  # kept for engines that run the sink in another thread (Flower)
            self.error = exc
            raise
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
