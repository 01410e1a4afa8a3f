"""LDP manipulation of the mean task (Cheu, Smith, Ullman 2021; docs/attacks.md §6).

A manipulating user skips its mechanism and reports V for each sampled dimension. With m = d every
user reports every dimension, so the naive estimate of dimension j moves by
(1/n) Σ_{attackers i} (V − y_ij) against the same run without the attack (the honest reports are
the same bits: the attackers still draw from the repetition's stream). Its expectation is
(1/n) Σ_i (V − E[y_ij]) = attack-fraction · (V − mean over attackers of E[y_ij]) with E[y_ij] =
``mech.mean(x_ij)``, and its variance (1/n²) Σ_i Var[y_ij] = (1/n²) Σ_i ``mech.var(x_ij)``: the test
allows 5 standard deviations of the sum over the d dimensions (independent reports, CLT).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.attacks.selection import attackers
from fedpriv.config import RunConfig
from fedpriv.rundir import Committed
from fedpriv.workloads import get_workload
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.mean.contract import REPORT, VALUES, report_request
from fedpriv.workloads.protocol import Broadcast, drive, stack_replies

N, D, FRACTION = 3000, 6, 0.1
BASE = {"task": "mean", "num-clients": N, "mean-dims": D, "sample-dims": 0, "repetitions": 1, "epsilon": 1.0,
        "mean-data": "uniform", "seed": 5}
CASES = {"piecewise": {}, "duchi": {}, "square_wave": {}, "laplace": {"attack-value": 4.0},
         "gaussian": {"attack-value": -6.0}}
WORKLOAD = get_workload("mean")


def _theta(overrides: dict):
    """The setup and the repetition's naive estimate θ̂ of a mean run in process."""
    setup = WORKLOAD.setup(RunConfig.from_mapping({**BASE, **overrides}))
    thetas = []

    def commit(step):
        thetas.append(step.arrays["theta"])
        return dict(step.record)

    drive(WORKLOAD.protocol(setup, WORKLOAD.load_server(setup), Committed()),
          InProcess(WORKLOAD, setup, "fast"), commit)
    return setup, thetas[0]


@pytest.mark.parametrize("mechanism", sorted(CASES))
def test_the_manipulation_bias_is_the_theorys(mechanism: str) -> None:
    _, honest = _theta({"mechanism": mechanism})
    setup, attacked = _theta({"mechanism": mechanism, "attack": "ldp-manipulation", "attack-fraction": FRACTION,
                              **CASES[mechanism]})
    bad = attackers(5, N, FRACTION)
    assert bad.size == 300
    lo, hi = setup.mech.output_range
    value = CASES[mechanism].get("attack-value", float(np.max(hi)))
    x = setup.dataset.x[bad]  # (attackers, d): the inputs their honest reports would have had
    expected = (value - setup.mech.mean(x)).sum(axis=0) / N  # = FRACTION · (V − mean E[report]) per dimension
    sd = np.sqrt(setup.mech.var(x).sum(axis=0)) / N
    measured = attacked - honest
    assert abs(measured.sum() - expected.sum()) <= 5 * np.sqrt((sd ** 2).sum())
    assert np.all(np.abs(measured - expected) <= 5 * sd)
    # the bias is the fraction times the distance from the honest report's mean to V (the estimator averages)
    np.testing.assert_allclose(expected, FRACTION * (value - setup.mech.mean(x).mean(axis=0)), rtol=1e-12)


def test_only_the_manipulating_users_reports_change_in_both_handlers() -> None:
    """Per user (Flower, deployment) and in the batch handler: the attackers' values are V, the rest the same bits."""
    n = 40
    cfg = {**BASE, "num-clients": n, "mechanism": "piecewise"}
    honest = WORKLOAD.setup(RunConfig.from_mapping(cfg))
    setup = WORKLOAD.setup(RunConfig.from_mapping({**cfg, "attack": "ldp-manipulation", "attack-fraction": 0.2}))
    bad = np.isin(np.arange(n), attackers(5, n, 0.2))
    step = Broadcast(clients=np.arange(n), kind="query", message=report_request(setup, 1))
    clean = WORKLOAD.batch_handler(honest, "fast", WORKLOAD.load_clients(honest), {})(step).records[REPORT][VALUES]
    together = WORKLOAD.batch_handler(setup, "fast", WORKLOAD.load_clients(setup), {})(step).records[REPORT][VALUES]
    alone = stack_replies(InProcess(WORKLOAD, setup, "fast")(step.requests())).records[REPORT][VALUES]
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_array_equal(together[~bad], clean[~bad])
    assert bad.sum() == 8 and np.all(together[bad] == setup.mech.output_range[1])


@pytest.mark.parametrize("overrides, match", [
    ({"mechanism": "laplace", "attack": "ldp-manipulation", "attack-fraction": 0.1}, "attack-value must be set"),
    ({"mechanism": "piecewise", "attack": "ldp-manipulation", "attack-fraction": 0.1, "attack-value": 100.0},
     "must lie in the output range"),
    ({"attack": "sign-flip", "attack-fraction": 0.1}, "attack must be one of 'none', 'ldp-manipulation' for task"),
])
def test_bad_manipulation_configs_are_refused(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        WORKLOAD.setup(RunConfig.from_mapping({**BASE, **overrides}))


def test_the_summary_names_the_manipulation(tmp_path) -> None:
    from simulations.runner import run

    cfg = RunConfig.from_mapping({**BASE, "num-clients": 50, "mechanism": "duchi", "attack": "ldp-manipulation",
                                  "attack-fraction": 0.1})
    result = run(cfg, engine="fast", root=tmp_path)
    attack = result.summary["attack"]
    assert attack["attackers"] == attackers(5, 50, 0.1).tolist() and attack["attacker-count"] == 5
    assert attack["attack-value"] == pytest.approx(float(WORKLOAD.setup(cfg).mech.output_range[1]))
