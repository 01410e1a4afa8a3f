"""LDP manipulation of the distribution task (Cheu, Smith, Ullman 2021; docs/attacks.md §7).

The honest users' reports are the same bits with and without the attack (each user draws from its
own keyed stream), so the attack's effect on an estimate is the attackers' rows alone.

**Linear estimates (the theory, exactly).** A frequency oracle's unbiased frequency of bin t is
x̃_t = (1/n) Σ_i s_i(t), with the support s_i(t) = (1[report i supports t] − q)/(p − q) (GRR: y_i = t;
OUE: bit t set; OLH: H_i(t) = y_i, with GRR_g's p and q = 1/g; docs/square_wave_ems.md §7.1–§7.3).
An attacker's report supports t, so a attackers move x̃_t by (1/n) Σ_attackers (s_max − s_i(t)) with
s_max = (1 − q)/(p − q). Given the attackers' values, its expectation is
(1/n) Σ_attackers (s_max − 1[bin_i = t]) = fraction · (s_max − share of attackers in bin t), and its
variance (1/n²) Σ_attackers π_i (1 − π_i)/(p − q)², with π_i = p if bin_i = t else q (the chance
an honest report of that user supports t): the test allows 5 standard deviations (CLT over the
attackers' independent reports). The mean-only methods (sr, pm) estimate μ̂ = (ȳ + 1)/2 from
reports of 2v − 1 by an unbiased mechanism, so the shift is (1/2n) Σ_attackers (V − y_i) with
expectation (1/2n) Σ (V − (2 v_i − 1)) and variance (1/4n²) Σ Var[y_i]: the same 5-SD rule.

**Square Wave + EMS (non-linear).** A Square Wave report y of v has mean A v + c₀ and a variance the
mechanism states (from its output density, docs/square_wave_ems.md §2.2), so the linear, unbiased mean estimate (ȳ − c₀)/A
moves by (1/(nA)) Σ_attackers (1 + b − y_i): expectation (1/(nA)) Σ (1 + b − A v_i − c₀), variance
(1/(nA)²) Σ Var[y_i], the same 5-SD rule. The EM/EMS estimate is a fixed point, not an average of
the reports, so no per-report formula predicts its shift; what the test asserts at this seed is
what the attack is for: the estimated mean and the mass of the top quarter of [0, 1] grow, and
the W1 error to the true histogram grows.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.attacks.selection import attackers
from fedpriv.config import RunConfig
from fedpriv.estimation.cfo import bin_index
from fedpriv.estimation.distribution_metrics import evaluate
from fedpriv.estimation.oracles import grr_params, olh_g, oue_params
from fedpriv.estimation.waves import square_wave_mechanism
from fedpriv.rng import stream
from fedpriv.workloads import get_workload
from fedpriv.workloads.distribution.contract import REPORT, report_request
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.protocol import Broadcast, stack_replies

N, D, FRACTION, SEED = 4000, 16, 0.1, 7
BASE = {"task": "distribution", "num-clients": N, "dist-buckets": D, "repetitions": 1, "epsilon": 1.0, "seed": SEED,
        "dist-data": "beta-5-2"}
ATTACK = {"attack": "ldp-manipulation", "attack-fraction": FRACTION}
WORKLOAD = get_workload("distribution")
MANIPULABLE = ("sw-ems", "sw-em", "grr", "olh", "oue", "cfo-16", "cfo-32", "sr", "pm")


def _reports(overrides: dict, n: int = N, query: int = 0) -> tuple:
    """The setup and every user's report of ``query`` from the in-process batch handler."""
    setup = WORKLOAD.setup(RunConfig.from_mapping({**BASE, "num-clients": n, **overrides}))
    step = Broadcast(clients=np.arange(n), kind="query", message=report_request(setup.method, query))
    return setup, WORKLOAD.batch_handler(setup, "fast", WORKLOAD.load_clients(setup), {})(step).records[REPORT]


@pytest.mark.parametrize("method", MANIPULABLE)
def test_only_the_manipulating_users_reports_change_in_both_handlers(method: str) -> None:
    """Per user (Flower, deployment) and in the batch handler: the same manipulated rows, the honest rows unchanged."""
    n = 40
    _, clean = _reports({"dist-method": method}, n)
    setup, together = _reports({"dist-method": method, **ATTACK, "attack-fraction": 0.2}, n)
    step = Broadcast(clients=np.arange(n), kind="query", message=report_request(setup.method, 0))
    alone = stack_replies(InProcess(WORKLOAD, setup, "fast")(step.requests())).records[REPORT]
    bad = np.isin(np.arange(n), attackers(SEED, n, 0.2))
    assert bad.sum() == 8 and together.keys() == clean.keys() == alone.keys()
    for key in together:
        np.testing.assert_array_equal(together[key], alone[key])
        np.testing.assert_array_equal(together[key][~bad], clean[key][~bad])
    if "report" in together:  # Square Wave, sr, pm: the upper end of the output range
        hi = 1.0 + setup.method.b if method.startswith("sw") else float(setup.method.mechanism.output_range[1])
        assert np.all(together["report"][bad] == hi)


@pytest.mark.parametrize("method", ["grr", "olh", "oue", "cfo-32"])
def test_a_frequency_oracles_target_bin_moves_by_the_theorys_shift(method: str) -> None:
    _, clean = _reports({"dist-method": method})
    setup, attacked = _reports({"dist-method": method, **ATTACK, "attack-value": 0.3})
    m = setup.method
    t = int(bin_index(np.array([0.3]), m.bins)[0])
    p, q = {"grr": grr_params(m.bins, m.epsilon), "oue": oue_params(m.epsilon),
            "olh": (grr_params(olh_g(m.epsilon), m.epsilon)[0], 1.0 / olh_g(m.epsilon))}[m.oracle]
    bad = attackers(SEED, N, FRACTION)
    in_t = bin_index(setup.values[bad], m.bins) == t
    expected = ((1 - q) / (p - q) - in_t).sum() / N
    pi = np.where(in_t, p, q)
    sd = np.sqrt((pi * (1 - pi)).sum()) / (p - q) / N
    measured = m.frequencies(attacked)[t] - m.frequencies(clean)[t]
    assert bad.size == 400 and expected > 10 * sd  # the test can tell the attack from no attack
    assert abs(measured - expected) <= 5 * sd
    np.testing.assert_allclose(expected, FRACTION * ((1 - q) / (p - q) - in_t.mean()), rtol=1e-12)


@pytest.mark.parametrize("method", ["sr", "pm"])
def test_a_mean_only_methods_estimate_moves_by_the_theorys_shift(method: str) -> None:
    _, clean = _reports({"dist-method": method})
    setup, attacked = _reports({"dist-method": method, **ATTACK})
    mech, bad = setup.method.mechanism, attackers(SEED, N, FRACTION)
    v = 2.0 * setup.values[bad] - 1.0  # what the attackers' honest reports would have been of
    value = float(mech.output_range[1])
    expected = (value - mech.mean(v)).sum() / (2 * N)
    sd = np.sqrt(mech.var(v).sum()) / (2 * N)
    measured = setup.method.estimate(attacked).mean - setup.method.estimate(clean).mean
    assert abs(measured - expected) <= 5 * sd and expected > 10 * sd


@pytest.mark.parametrize("method", ["sw-ems", "sw-em"])
def test_square_wave_reports_move_by_the_theorys_shift_and_ems_moves_mass_to_the_attacked_end(method: str) -> None:
    """The reports' linear mean estimate moves by the theory; EMS (not linear) moves up and its W1 grows (docstring)."""
    _, clean = _reports({"dist-method": method})
    setup, attacked = _reports({"dist-method": method, **ATTACK})
    mech, bad = square_wave_mechanism(setup.method.epsilon), attackers(SEED, N, FRACTION)
    assert float(mech.b) == setup.method.b  # the method's reports are this mechanism's
    v = setup.values[bad]
    expected = (1.0 + mech.b - mech.mean(v)).sum() / (N * mech.A)
    sd = np.sqrt(mech.var(v).sum()) / (N * mech.A)
    measured = (attacked["report"].mean() - clean["report"].mean()) / mech.A  # shift of (ȳ − c₀)/A
    assert abs(measured - expected) <= 5 * sd and expected > 10 * sd
    before, after = setup.method.estimate(clean), setup.method.estimate(attacked)
    top = slice(3 * D // 4, D)
    assert after.mean > before.mean and after.histogram[top].sum() > before.histogram[top].sum()
    w1 = [evaluate(setup.true_histogram, e, stream(SEED, 1, 0, "t"), alphas=(0.1,), queries=10)["w1_raw"]
          for e in (before, after)]
    assert w1[1] > w1[0]


@pytest.mark.parametrize("overrides, match", [
    ({"dist-method": "hh", "dist-buckets": 16, **ATTACK}, "attack 'ldp-manipulation' supports dist-method"),
    ({"dist-method": "sw-ems", **ATTACK, "attack-value": 3.0}, r"must lie in the Square Wave report range \[-"),
    ({"dist-method": "grr", **ATTACK, "attack-value": 1.5}, r"must be a value in the domain \[0, 1\]"),
    ({"dist-method": "pm", **ATTACK, "attack-value": 100.0}, "must lie in the output range"),
    ({"attack": "sign-flip", "attack-fraction": 0.1}, "attack must be one of 'none', 'ldp-manipulation' for task "
                                                      "'distribution'"),
    ({"attack": "ldp-manipulation", "attack-fraction": 0.0001}, "chooses no attacker"),
])
def test_bad_manipulation_configs_are_refused(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        WORKLOAD.setup(RunConfig.from_mapping({**BASE, **overrides}))


def test_the_summary_and_printout_name_the_manipulation(tmp_path) -> None:
    from rich.console import Console

    from simulations.runner import run

    cfg = RunConfig.from_mapping({**BASE, "num-clients": 50, "dist-method": "sw-ems", **ATTACK})
    result = run(cfg, engine="fast", root=tmp_path)
    attack = result.summary["attack"]
    assert attack["attackers"] == attackers(SEED, 50, FRACTION).tolist() and attack["attacker-count"] == 5
    assert attack["attack-value"] == pytest.approx(1.0 + WORKLOAD.setup(cfg).method.b)
    console = Console(record=True, width=300)
    WORKLOAD.report.print_run(console, result.rounds, result.summary)
    assert "attack: ldp-manipulation by 5 client(s), 10% of all" in console.export_text()
