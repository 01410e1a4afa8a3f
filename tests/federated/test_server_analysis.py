"""ServerAnalysis: the round's predicted deviation against the real perturbation, the oracle, HDR4ME."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedpriv.analysis.normal import sq_norm_moments
from fedpriv.config import RunConfig
from fedpriv.federated.local import build_perturbation
from fedpriv.federated.server_analysis import RoundInputs, ServerAnalysis
from fedpriv.rng import stream

D, K = 40, 12


def _config(**values: object) -> RunConfig:
    base = {"perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 20.0, "local-steps": 1,
            "lr": 0.5, "clip-norm": 1.0, "analyzer": "on", "analyzer-oracle": "on"}
    return RunConfig.from_mapping({**base, **values})


def _gradients(seed: int = 3) -> np.ndarray:
    g = stream(seed, 0, 0, "tests/server-analysis/grads").normal(0.0, 0.05, (K, D))
    return g / np.maximum(1.0, np.linalg.norm(g, axis=1, keepdims=True))  # clipped to C = 1


def _round(cfg: RunConfig, grads: np.ndarray, rep: int, weights: np.ndarray) -> RoundInputs:
    """One E = 1 round the way clients build it: upload = w − η·privatize(g̃), clean = w − η·g̃."""
    pert = build_perturbation(cfg, batch_size=cfg.batch_size)
    w = np.linspace(-0.2, 0.2, D)
    eta = cfg.lr
    noisy = np.stack([pert.perturb(torch.from_numpy(g), stream(cfg.seed, rep, k, "noise")).vector.numpy()
                      for k, g in enumerate(grads)])
    updates, clean = w - eta * noisy, w - eta * grads
    p = weights / weights.sum()
    return RoundInputs(server_round=1, global_params=w, updates=updates, weights=weights, aggregated=p @ updates,
                       clean=clean)


@pytest.mark.parametrize("mechanism, moments, relation", [
    ("laplace", "bound", "equal"),        # unbounded: the law does not depend on the data
    ("gaussian", "bound", "equal"),
    ("piecewise", "reports", "equal"),    # the reports' unbiased t² estimate (§7.3 iii)
    ("piecewise", "bound", "upper"),      # |t| = 1 worst case: an upper bound (§7.3 i)
])
@pytest.mark.parametrize("weighting", ["equal", "dirichlet"])
def test_predicted_sq_deviation_matches_the_realized_mean(mechanism: str, moments: str, relation: str,
                                                          weighting: str) -> None:
    """Mean over R rounds of the realized ‖Δ‖² is within 5 SE of the mean predicted E‖Δ‖² (SE from the law)."""
    cfg = _config(mechanism=mechanism, **{"analyzer-moments": moments})
    grads = _gradients()
    weights = (np.ones(K) if weighting == "equal"
               else stream(1, 0, 0, "tests/server-analysis/dirichlet").dirichlet(np.ones(K)))
    analysis = ServerAnalysis(cfg, D)
    reps = 300
    realized, predicted, law = [], [], None
    for rep in range(reps):
        inputs = _round(cfg, grads, rep, weights)
        _, metrics = analysis(inputs)
        realized.append(metrics["realized-sq-deviation"])
        predicted.append(metrics["predicted-sq-deviation"])
        law = analysis.law(inputs)
    _, var = sq_norm_moments(law.mean, law.var)
    se = math.sqrt(var / reps)
    gap = np.mean(realized) - np.mean(predicted)
    if relation == "equal":
        assert abs(gap) < 5 * se
    else:
        assert gap < 5 * se and -gap > 5 * se  # a strict upper bound here: the gradients are far from |t| = 1


def test_oracle_off_logs_no_realized_deviation_and_none_mode_keeps_the_aggregate() -> None:
    cfg = _config(**{"analyzer-oracle": "off"})
    inputs = _round(cfg, _gradients(), 0, np.ones(K))
    new, metrics = ServerAnalysis(cfg, D)(inputs)
    assert "realized-sq-deviation" not in metrics and metrics["predicted-sq-deviation"] > 0
    np.testing.assert_allclose(new, inputs.aggregated, rtol=0, atol=1e-12)


def test_recalibration_recovers_the_mean_report_and_shrinks_the_deviation() -> None:
    """E = 1: θ̂ = (w − w_agg)/(η C/√d); HDR4ME-L2 in the high-noise regime lowers the realized deviation."""
    cfg = _config(epsilon=2.0, recalibration="l2")
    analysis = ServerAnalysis(cfg, D)
    before, after = [], []
    for rep in range(50):
        _, metrics = analysis(_round(cfg, _gradients(), rep, np.ones(K)))
        before.append(metrics["realized-sq-deviation"])
        after.append(metrics["realized-sq-deviation-recalibrated"])
    assert np.mean(after) < 0.1 * np.mean(before)
    assert all(0.0 <= metrics[k] <= 1.0 for k in ("recal-p-none", "recal-p-l1", "recal-p-l2"))


def test_from_config_is_none_when_everything_is_off() -> None:
    assert ServerAnalysis.from_config(RunConfig(), 10) is None
    assert ServerAnalysis.from_config(_config(), 10) is not None


@pytest.mark.parametrize("values, match", [
    ({"strategy": "fedmedian"}, "need strategy = 'fedavg'"),
    ({"recalibration": "l1", "local-steps": 2}, "local-steps = 1"),
    ({"recalibration": "l1", "perturbation": "ldpvec"}, "perturbation = 'coordinatewise'"),
    ({"analyzer-moments": "reports"}, "mechanism = 'piecewise'"),
    ({"analyzer-moments": "proxy"}, "needs server-held proxy gradients"),
    ({"perturbation": "ldpvec"}, "needs server-held proxy gradients"),
])
def test_bad_configurations_are_refused_by_name(values: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ServerAnalysis(_config(**values), D)
