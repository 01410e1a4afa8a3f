"""``perturbation = "dpsgd"``: DP-SGD (Abadi et al. 2016; docs/geodp.md §2) in federated LDP-SGD's local training.

What is checked: the released noise has the calibrated scale Cσ/b (statistically, fixed seed, CLT
tolerance); the run's ledger ε is dp-accounting's RDP ε of the Poisson-subsampled Gaussian for the
same (q, σ, steps); a run interrupted at a commit never reports less ε than the rounds its committed
model covers; AUTO-S clipping (Bu et al. 2023) bounds every per-sample norm by C.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.rdp import RdpAccountant
from sklearn.datasets import load_digits

from fedpriv import rundir
from fedpriv.accounting import PrivacyLedger
from fedpriv.config import RunConfig
from fedpriv.federated import build_perturbation, clip_per_sample, finish_update, local_update, release_rng
from fedpriv.models import build_model, get_flat
from fedpriv.perturbation import GaussianDPSGD
from fedpriv.rundir import RunDirectory
from simulations.runner import RunInterrupted, run

SEED = 3
RUN = {"num-clients": 3, "rounds": 3, "local-steps": 2, "batch-size": 16, "perturbation": "dpsgd", "sigma": 1.3,
       "clip-norm": 0.7, "noise-schedule": "every_step", "dataset": "digits", "partition": "iid", "seed": SEED}


def _rdp_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    """ε of ``steps`` Poisson-subsampled Gaussian steps straight from dp-accounting (the oracle)."""
    acc = RdpAccountant()
    acc.compose(SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps))
    return float(acc.get_epsilon(delta))


def _worst_expected(ledger_state: dict, rounds: int) -> float:
    """The oracle ε of the worst client (smallest n_k: largest q) after ``rounds`` rounds of RUN."""
    n_min = min(int(v) for v in ledger_state["num_examples"].values())
    q = min(1.0, RUN["batch-size"] / n_min)
    return _rdp_epsilon(q, RUN["sigma"], rounds * RUN["local-steps"], 1e-5)


def test_released_noise_has_scale_c_sigma_over_b() -> None:
    """noise = (upload − base)/scale − g̃ ~ N(0, (Cσ/b)²) per coordinate (docs/geodp.md §2 step 3).

    n = 80 releases × 65 coordinates = 5200 draws. The sample variance's relative standard error is
    √(2/(n−1)) ≈ 0.020; 4 of them allow 8%: a noise of Cσ (no /b) or Cσ/√b is off by a factor ≥ 5.
    The mean: |mean| ≤ 4·s/√n.
    """
    X, Y = load_digits(return_X_y=True)
    x = torch.tensor(X[:100] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(Y[:100] >= 5, dtype=torch.int64)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    cfg = RunConfig.from_mapping({"perturbation": "dpsgd", "sigma": 2.0, "clip-norm": 0.5, "batch-size": 25,
                                  "local-steps": 1, "seed": SEED})
    res = local_update(model, get_flat(model), x, y, cfg, server_round=1, client_id=0, num_classes=2)
    pert = build_perturbation(cfg, batch_size=25)
    assert isinstance(pert, GaussianDPSGD)
    v = res.release.vector.double()
    noise = []
    for r in range(1, 81):
        out, metrics = finish_update(res, pert, release_rng(cfg, server_round=r, client_id=0))
        noise.append(((out.double() - res.release.base.double()) / res.release.scale - v).numpy())
    z = np.concatenate(noise)
    std = 0.5 * 2.0 / 25
    assert metrics["noise_std"] == pytest.approx(std)
    assert abs(z.var(ddof=1) / std**2 - 1) < 4 * math.sqrt(2 / (z.size - 1))
    assert abs(z.mean()) < 4 * std / math.sqrt(z.size)


@pytest.mark.parametrize("engine", ["fast", "batched"])
def test_ledger_epsilon_is_dp_accountings_subsampled_gaussian(tmp_path, engine: str) -> None:
    """The worst client's ε equals dp-accounting's RDP for q = B/n_k, σ and E·R steps (both engines)."""
    result = run(RunConfig.from_mapping(RUN), engine=engine, root=tmp_path)
    state = json.loads((result.directory / "ledger.json").read_text())
    assert state["kind"] == "dpsgd"
    totals = result.summary["privacy"]
    assert totals["epsilon_total_max"] == pytest.approx(_worst_expected(state, RUN["rounds"]), rel=1e-9)
    assert totals["delta_total"] == 1e-5
    assert "conservative" not in totals["epsilon_total_is"]  # DP-SGD has one accounting


@pytest.mark.parametrize("step", ["checkpoint-written", "checkpoint-committed", "ledger-written"])
def test_an_interrupted_run_never_under_reports(tmp_path, step: str) -> None:
    """Stopped inside round 2's commit: the committed ledger covers at least the rounds of the committed model."""
    def stop(at: str, r: int) -> None:
        if (at, r) == (step, 2):
            raise KeyboardInterrupt

    rundir.fault_hook = stop
    try:
        with pytest.raises(RunInterrupted):
            run(RunConfig.from_mapping(RUN), engine="fast", root=tmp_path)
    finally:
        rundir.fault_hook = None
    (path,) = tmp_path.iterdir()
    with RunDirectory.open(path) as directory:
        committed = directory.recover()
    assert committed.ledger is not None and committed.round >= 1
    ledger = PrivacyLedger.from_state_dict(committed.ledger)
    assert len(ledger.rounds) == committed.round
    on_disk = PrivacyLedger.from_state_dict(json.loads((path / "ledger.json").read_text()))
    expected = _worst_expected(committed.ledger, committed.round)
    for reported in (ledger.totals()["epsilon_total_max"], on_disk.totals()["epsilon_total_max"]):
        assert reported >= expected * (1 - 1e-9)


@pytest.mark.parametrize("clipping", ["flat", "auto-s"])
def test_per_sample_norms_are_bounded_by_c(clipping: str) -> None:
    """Flat: ‖g̃‖ ≤ C, rows within C unchanged. AUTO-S: ‖g̃‖ = C‖g‖/(‖g‖ + γ) < C for every row."""
    gen = torch.Generator().manual_seed(SEED)
    scales = torch.logspace(-4, 4, 64).unsqueeze(1)
    grads = torch.randn(64, 50, generator=gen) * scales
    grads[0] = 0.0
    out, count = clip_per_sample(grads, 0.3, clipping, gamma=0.01)
    norms = torch.linalg.vector_norm(out, dim=1)
    assert bool((norms <= 0.3 * (1 + 1e-6)).all())
    assert torch.equal(out[0], grads[0])  # a zero row stays zero
    raw = torch.linalg.vector_norm(grads.double(), dim=1)
    if clipping == "flat":
        within = raw <= 0.3
        assert torch.equal(out[within], grads[within]) and count == int((~within).sum())
    else:
        torch.testing.assert_close(norms.double(), 0.3 * raw / (raw + 0.01), rtol=1e-5, atol=0)
        assert count == 64


def test_clipping_defaults_to_flat_and_auto_s_is_refused_without_per_sample_gradients() -> None:
    cfg = RunConfig()
    assert cfg["clipping"] == "flat" and cfg["auto-s-gamma"] == 0.01
    with pytest.raises(ValueError, match="clipping applies to the per-sample perturbations"):
        build_perturbation(RunConfig.from_mapping({"perturbation": "coordinatewise", "clipping": "auto-s"}),
                           batch_size=4)


def test_auto_s_changes_the_release_and_keeps_its_norm_below_c() -> None:
    """AUTO-S is used by local training (not only by the helper): the release differs from flat's, norm < C."""
    X, Y = load_digits(return_X_y=True)
    x = torch.tensor(X[:64] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(Y[:64], dtype=torch.int64)
    model = build_model("lr", (1, 8, 8), 10, seed=SEED)
    base = {"perturbation": "dpsgd", "sigma": 0.0, "clip-norm": 0.2, "batch-size": 16, "local-steps": 1}
    flat = local_update(model, get_flat(model), x, y, RunConfig.from_mapping(base), server_round=1, client_id=0,
                        num_classes=10)
    auto = local_update(model, get_flat(model), x, y, RunConfig.from_mapping({**base, "clipping": "auto-s"}),
                        server_round=1, client_id=0, num_classes=10)
    assert not torch.allclose(flat.release.vector, auto.release.vector)
    assert float(auto.release.vector.norm()) < 0.2
    assert auto.metrics["clip_fraction"] == 1.0
