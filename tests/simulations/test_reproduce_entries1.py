"""The judges of the federated LDP-SGD, LDPVec and Square Wave ablation reproductions say both verdicts."""

from __future__ import annotations

import math

from simulations.reproduce import ENTRIES
from simulations.reproduce.entry import with_grid


def _fl(cell: str, **values: object) -> dict[str, object]:
    return {"cell": cell, "perturbation": "coordinatewise", "mechanism": "gaussian", "epsilon_per_round": 1.5,
            **values}


def test_with_grid_reads_the_cells_label_as_numbers_where_it_can() -> None:
    (row,) = with_grid([{"cell": "local-steps=5 ldpvec-control=random-direction seed=1", "x": 2}])
    assert row == {"cell": "local-steps=5 ldpvec-control=random-direction seed=1", "local-steps": 5.0,
                   "ldpvec-control": "random-direction", "seed": 1.0, "x": 2}


def test_mechanism_ranking_needs_gaussian_then_piecewise_then_laplace_at_every_epsilon() -> None:
    judge = ENTRIES["fedldp-mechanisms"].judge
    rows = [_fl("a", mechanism="gaussian", final_test_loss=0.5), _fl("b", mechanism="piecewise", final_test_loss=2.0),
            _fl("c", mechanism="laplace", final_test_loss=3.0),
            _fl("d", mechanism="gaussian", final_test_loss=0.4, epsilon_per_round=15.3),
            _fl("e", mechanism="piecewise", final_test_loss=0.9, epsilon_per_round=15.3),
            _fl("f", mechanism="laplace", final_test_loss=1.0, epsilon_per_round=15.3)]
    assert judge(rows).verdict == "reproduced"
    rows[5] = {**rows[5], "final_test_loss": 0.8}  # laplace below piecewise at ε = 15.3
    verdict = judge(rows)
    assert verdict.verdict == "not reproduced" and "epsilon_per_round = 15.3" in verdict.evidence
    # a diverged (NaN) Laplace cell counts as the worst, not as a missing cell
    rows[5] = {**rows[5], "final_test_loss": math.nan}
    assert judge(rows).verdict == "reproduced"
    assert judge(rows[:2]).verdict == "not reproduced"  # no ε holds all three


def test_client_count_judge_reads_the_noisy_cells_only() -> None:
    judge = ENTRIES["fedldp-clients"].judge
    rows = [_fl("num-clients=10 perturbation=coordinatewise", final_test_loss=3.0),
            _fl("num-clients=10 perturbation=none", perturbation="none", final_test_loss=0.2),
            _fl("num-clients=100 perturbation=coordinatewise", final_test_loss=1.0),
            _fl("num-clients=100 perturbation=none", perturbation="none", final_test_loss=0.5)]
    assert judge(rows).verdict == "reproduced"  # the noise-free cells' rise is not judged
    rows[2] = {**rows[2], "final_test_loss": 3.5}
    assert judge(rows).verdict == "not reproduced"


def test_ldpvec_vs_numeric_needs_a_lower_loss_for_every_mechanism() -> None:
    judge = ENTRIES["ldpvec-vs-numeric"].judge
    rows = [_fl("a", perturbation="ldpvec", final_test_loss=0.3), _fl("b", final_test_loss=2.0),
            _fl("c", perturbation="ldpvec", mechanism="laplace", final_test_loss=0.3),
            _fl("d", mechanism="laplace", final_test_loss=9.0)]
    assert judge(rows).verdict == "reproduced"
    rows[1] = {**rows[1], "final_test_loss": 0.3}  # a tie is not "below"
    assert judge(rows).verdict == "not reproduced"


def _control(steps: int, control: str, seed: int, loss: float, acc: float = 0.5) -> dict[str, object]:
    return {"cell": f"local-steps={steps} ldpvec-control={control} seed={seed}", "final_test_loss": loss,
            "final_accuracy": acc}


def test_controls_judge_pools_the_seeds_and_needs_two_standard_errors_against_skip_and_random_direction() -> None:
    judge = ENTRIES["ldpvec-controls"].judge
    # per (E, control) two seeds at loss ± 0.1: std 0.1414, SE 0.1, margin 2·√2·0.1 = 0.283
    def rows(ldpvec: float) -> list[dict[str, object]]:
        out = []
        for steps in (1, 5):
            for control, loss in (("none", ldpvec), ("skip", 2.0), ("random-direction", 2.0), ("permute", 2.0)):
                out += [_control(steps, control, 0, loss - 0.1), _control(steps, control, 1, loss + 0.1)]
        return out

    assert judge(rows(1.70)).verdict == "reproduced"  # 0.30 below both controls
    held = judge(rows(1.72))  # 0.28 below: within 2 SE
    assert held.verdict == "not reproduced" and "not lower by 2 SE" in held.evidence
    one_e = [r for r in rows(1.0) if not str(r["cell"]).startswith("local-steps=5")] + [
        _control(5, c, s, 2.0) for c in ("none", "skip", "random-direction") for s in (0, 1)]
    assert judge(one_e).verdict == "not reproduced"  # equal to skip at E = 5


def test_controls_plot_groups_bars_by_local_steps() -> None:
    from pathlib import Path
    from tempfile import TemporaryDirectory

    rows = [_control(1, c, s, 2.0, acc=0.1 + s / 100) for c in ("none", "skip") for s in (0, 1)]
    with TemporaryDirectory() as tmp:
        path = ENTRIES["ldpvec-controls"].plot(rows, Path(tmp) / "c.png", "t")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _sw(cell: str, w1: float, se: float = 0.0, epsilon: float = 2.0) -> dict[str, object]:
    return {"cell": f"epsilon={epsilon} {cell}", "method": "sw-ems", "epsilon": epsilon, "w1_raw": w1, "w1_raw_se": se}


def test_bandwidth_judge_allows_ten_percent_and_two_standard_errors_above_the_best_width() -> None:
    judge = ENTRIES["sw-bandwidth"].judge
    # bound = 1.1 · 2.0 + 2·√(0.05² + 0.05²) = 2.2 + 0.1414
    rows = [_sw("sw-b=auto", 2.34, 0.05), _sw("sw-b=0.02", 5.0, 0.05), _sw("sw-b=0.3", 2.0, 0.05)]
    assert judge(rows).verdict == "reproduced"
    rows[0] = _sw("sw-b=auto", 2.35, 0.05)
    verdict = judge(rows)
    assert verdict.verdict == "not reproduced" and "best other sw-b = 0.3" in verdict.evidence
    assert judge(rows[1:]).verdict == "not reproduced"  # no b(ε) cell


def test_wave_shape_judge_needs_the_square_wave_lowest_within_two_standard_errors() -> None:
    judge = ENTRIES["sw-wave-shape"].judge
    rows = [_sw("sw-shape=square", 3.0, 0.1, 1.0), _sw("sw-shape=triangle", 2.8, 0.1, 1.0),
            _sw("sw-shape=trapezoid-0.4", 3.5, 0.1, 1.0)]
    assert judge(rows).verdict == "reproduced"  # 0.2 ≤ 2·√2·0.1 = 0.283
    rows[1] = _sw("sw-shape=triangle", 2.7, 0.1, 1.0)
    assert judge(rows).verdict == "not reproduced"


def test_discrete_vs_continuous_judge_is_two_sided() -> None:
    judge = ENTRIES["sw-discrete-vs-continuous"].judge
    # bound = 0.1 · 2.0 + 2·√(0.01² + 0.01²) = 0.2283
    assert judge([_sw("sw-bucketize=R-B", 2.0, 0.01), _sw("sw-bucketize=B-R", 2.22, 0.01)]).verdict == "reproduced"
    assert judge([_sw("sw-bucketize=R-B", 2.0, 0.01), _sw("sw-bucketize=B-R", 1.78, 0.01)]).verdict == "reproduced"
    assert judge([_sw("sw-bucketize=R-B", 2.0, 0.01), _sw("sw-bucketize=B-R", 2.24, 0.01)]).verdict == "not reproduced"
    assert judge([_sw("sw-bucketize=R-B", 2.0, 0.01), _sw("sw-bucketize=B-R", 1.76, 0.01)]).verdict == "not reproduced"
    assert judge([_sw("sw-bucketize=R-B", 2.0, 0.01)]).verdict == "not reproduced"
