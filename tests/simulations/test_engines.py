"""The fast, batched and Flower simulation engines give the same global model for the same config and seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpriv.config import RunConfig
from simulations.runner import run
from tests._rounding import assert_agree, engine_run

CASES = {
    "none": {"perturbation": "none"},
    "coordinatewise": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0},
    "ldpvec": {"perturbation": "ldpvec", "mechanism": "gaussian", "epsilon": 5.0},
    "geodp": {"perturbation": "geodp", "sigma": 0.5, "noise-schedule": "every_step"},
    "dpsgd-auto-s": {"perturbation": "dpsgd", "sigma": 0.5, "noise-schedule": "every_step", "clipping": "auto-s"},
    # a stateful server-side defence: each round starts from the previous round's aggregated update
    "centeredclip": {"perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 5.0,
                     "strategy": "centeredclip", "num-malicious": 1, "cc-tau": 0.05, "cc-iters": 2},
    # the server-side evaluator with the simulation oracle and HDR4ME re-calibration (E = 1)
    "analyzer-hdr4me": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0,
                        "analyzer": "on", "analyzer-oracle": "on", "recalibration": "hdr4me*", "local-steps": 1},
    # an attack (docs/attacks.md): the same attacker (1 of 4 clients), the same poisoned upload in every engine
    "sign-flip": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0, "attack": "sign-flip",
                  "attack-fraction": 0.25},
    # LDP manipulation (docs/attacks.md §8): the ends of Piecewise's output range against the attacker's own step
    "ldp-manipulation": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0,
                         "attack": "ldp-manipulation", "attack-fraction": 0.25},
    # data poisoning: the attacker's keyed examples carry the trigger in every engine, ASR measured by one function
    "backdoor": {"perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 5.0, "attack": "backdoor",
                 "attack-fraction": 0.25, "backdoor-target": 3},
}
ANALYSIS_KEYS = ("predicted-sq-deviation", "predicted-sq-deviation-q95", "realized-sq-deviation",
                 "realized-sq-deviation-recalibrated", "recal-p-l2")


@pytest.mark.slow(reason="three engines per case, one a Flower simulation (its ClientApps in Ray actors)")
@pytest.mark.subprocess
@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_batched_and_flower_engines_agree(case: str, tmp_path: Path) -> None:
    """Same clients (local_update + finish_update), same order, same aggregation.

    The fast and Flower engines run the same code on the same inputs at one torch thread each (the
    Flower engine's actors are set to one, as the fast engine sets itself): the same kernels, so the
    same bits. The batched engine's vmapped training orders its reductions differently: it agrees
    within the two engines' float32 rounding errors (tests/_rounding.py).
    """
    cfg = RunConfig.from_mapping({"num-clients": 4, "rounds": 2, "local-steps": 2, "batch-size": 8,
                                  "noise-schedule": "last_step", **CASES[case]})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["status"] == "finished", flower.summary["error"]
    np.testing.assert_array_equal(flower.params, fast.params)
    batched = run(cfg, engine="batched", root=tmp_path / "batched")
    fast64, batched64 = engine_run("fast", cfg, float64=True), engine_run("batched", cfg, float64=True)
    assert_agree(batched.params, fast.params, a64=batched64[0], b64=fast64[0], what="global model")
    assert [r["client-ids"] for r in batched.rounds] == [r["client-ids"] for r in flower.rounds]
    assert [r["client-ids"] for r in flower.rounds] == [r["client-ids"] for r in fast.rounds]
    assert flower.rounds[-1]["test-accuracy"] == fast.rounds[-1]["test-accuracy"]
    assert [r.get("backdoor-asr") for r in flower.rounds] == [r.get("backdoor-asr") for r in fast.rounds]
    if cfg["analyzer"] == "on":  # the evaluator's metrics reach metrics.jsonl in both engines, with equal values
        for f, w in zip(fast.rounds, flower.rounds):
            for key in ANALYSIS_KEYS:
                assert w[key] == f[key], key
