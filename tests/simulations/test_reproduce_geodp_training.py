"""The judges of the GeoDP-vs-DP-SGD training reproductions say both verdicts, on synthetic rows."""

from __future__ import annotations

import math

import pytest

from simulations.reproduce import ENTRIES, geodp_training
from simulations.reproduce.entry import with_grid


def _rows(metric: str, values: dict[tuple[str, float], list[float]], extra: str = "") -> list[dict[str, object]]:
    """Comparison rows as ``fedpriv compare`` writes them: the grid values only in the cell label."""
    return [{"cell": f"{extra}perturbation={p} sigma={s:g} seed={i}", "perturbation": p, metric: v}
            for (p, s), vs in values.items() for i, v in enumerate(vs)]


def test_grid_values_and_pooling_over_seeds() -> None:
    rows = _rows("final_train_loss", {("geodp", 0.1): [0.5, 0.7], ("dpsgd", 0.1): [0.9, 0.9]})
    assert with_grid(rows)[0]["sigma"] == 0.1
    pool = {r["perturbation"]: r for r in geodp_training.pooled(rows, ("final_train_loss",))}
    assert pool["geodp"]["final_train_loss"] == pytest.approx(0.6)
    assert pool["geodp"]["final_train_loss_se"] == pytest.approx(math.sqrt(0.02 / 2))  # std 0.1414 / √2
    assert pool["dpsgd"]["final_train_loss_se"] == 0.0


def test_lr_judge_says_both_verdicts() -> None:
    judge = ENTRIES["geodp-lr-loss"].judge
    wins = {("geodp", 0.01): [0.30, 0.31, 0.30], ("dpsgd", 0.01): [0.40, 0.41, 0.40],
            ("geodp", 0.1): [0.35, 0.36, 0.35], ("dpsgd", 0.1): [0.50, 0.52, 0.51]}
    assert judge(_rows("final_train_loss", wins)).verdict == "reproduced"
    # at σ = 0.1 the means differ by less than 2 SE of the seeds: not a win
    tie = {**wins, ("geodp", 0.1): [0.40, 0.50, 0.60], ("dpsgd", 0.1): [0.45, 0.55, 0.65]}
    verdict = judge(_rows("final_train_loss", tie))
    assert verdict.verdict == "not reproduced" and "sigma = 0.1" in verdict.evidence
    # DP-SGD lower: not reproduced
    lose = {k: ([v + 0.5 for v in vs] if k[0] == "geodp" else vs) for k, vs in wins.items()}
    assert judge(_rows("final_train_loss", lose)).verdict == "not reproduced"


def test_cnn_judge_wants_higher_accuracy_in_every_clipping_panel() -> None:
    judge = ENTRIES["geodp-cnn-accuracy"].judge
    good = {("geodp", 1.0): [0.80, 0.82], ("dpsgd", 1.0): [0.50, 0.52]}
    rows = _rows("final_accuracy", good, "clipping=flat ") + _rows("final_accuracy", good, "clipping=auto-s ")
    verdict = judge(rows)
    assert verdict.verdict == "reproduced" and "0.81" in verdict.evidence and "-0." not in verdict.evidence
    bad = {("geodp", 1.0): [0.40, 0.42], ("dpsgd", 1.0): [0.50, 0.52]}  # lower accuracy under AUTO-S
    rows = _rows("final_accuracy", good, "clipping=flat ") + _rows("final_accuracy", bad, "clipping=auto-s ")
    verdict = judge(rows)
    assert verdict.verdict == "not reproduced" and "clipping = auto-s" in verdict.evidence
    assert "not higher by 2 SE" in verdict.evidence and "not lower" not in verdict.evidence


def test_a_failed_cell_is_never_a_win() -> None:
    rows = _rows("final_train_loss", {("geodp", 0.1): [0.1, 0.1], ("dpsgd", 0.1): [0.9, 0.9]})
    rows[0]["final_train_loss"] = None
    assert ENTRIES["geodp-lr-loss"].judge(rows).verdict == "not reproduced"
