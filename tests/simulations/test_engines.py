"""The fast, batched and Flower simulation engines give the same global model for the same config and seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpriv.config import RunConfig
from simulations.runner import run

CASES = {
    "none": {"perturbation": "none"},
    "coordinatewise": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0},
    "ldpvec": {"perturbation": "ldpvec", "mechanism": "gaussian", "epsilon": 5.0},
    "geodp": {"perturbation": "geodp", "sigma": 0.5, "noise-schedule": "every_step"},
    # the server-side evaluator with the simulation oracle and HDR4ME re-calibration (E = 1)
    "analyzer-hdr4me": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0,
                        "analyzer": "on", "analyzer-oracle": "on", "recalibration": "hdr4me*", "local-steps": 1},
}
ANALYSIS_KEYS = ("predicted-sq-deviation", "predicted-sq-deviation-q95", "realized-sq-deviation",
                 "realized-sq-deviation-recalibrated", "recal-p-l2")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_batched_and_flower_engines_agree(case: str, tmp_path: Path) -> None:
    """Same clients (local_update + finish_update), same order, same aggregation: equal to float32 rounding.

    The fast and Flower engines run identical float32 arithmetic in the same client order, so the
    models agree to the last bit in practice; the tolerance allows one float32 ulp of the largest
    parameter in case a different BLAS path rounds one reduction differently. The batched engine
    reduces its batched matmuls in another order: 16 ulps (tests/simulations/test_batched_engine.py).
    """
    cfg = RunConfig.from_mapping({"num-clients": 4, "rounds": 2, "local-steps": 2, "batch-size": 8, **CASES[case]})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["status"] == "finished", flower.summary["error"]
    tol = float(np.spacing(np.float32(np.abs(fast.params).max())))
    np.testing.assert_allclose(flower.params, fast.params, rtol=0, atol=tol)
    batched = run(cfg, engine="batched", root=tmp_path / "batched")
    np.testing.assert_allclose(batched.params, flower.params, rtol=0, atol=16 * tol)
    assert [r["client-ids"] for r in batched.rounds] == [r["client-ids"] for r in flower.rounds]
    assert [r["client-ids"] for r in flower.rounds] == [r["client-ids"] for r in fast.rounds]
    assert flower.rounds[-1]["test-accuracy"] == pytest.approx(fast.rounds[-1]["test-accuracy"], abs=1e-9)
    if cfg["analyzer"] == "on":  # the evaluator's metrics reach metrics.jsonl in both engines, with equal values
        for f, w in zip(fast.rounds, flower.rounds):
            for key in ANALYSIS_KEYS:
                assert w[key] == pytest.approx(f[key], rel=1e-5), key
