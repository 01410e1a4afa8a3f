"""Reproduction of the membership-inference table of Duan's thesis (Table 5.4; docs/geodp.md, docs/attacks.md §9).

A model is trained centrally (one client holds the whole training set) without noise, with DP-SGD
and with GeoDP at the same σ, then attacked by the loss-threshold attack (``membership-attack``). The grid's
``perturbation`` axis lists the trainers compared; another trainer is one more value of it
(:data:`PERTURBATIONS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from simulations.reproduce.entry import Entry, Rows, Scale, Verdict
from simulations.reproduce.figures import bars

__all__ = ["ENTRIES", "PERTURBATIONS"]

#: The trainers compared (the grid's ``perturbation`` axis).
PERTURBATIONS: tuple[str, ...] = ("none", "dpsgd", "geodp")
_COLUMNS = ("perturbation", "epsilon_total", "final_accuracy", "mia_auc", "mia_auc_null_se", "mia_advantage")


def _scale(rounds: int, steps: int = 21) -> Scale:
    """Digits, one client holding the whole training set, ``steps`` steps of B = 64 per round (21: one epoch), GeoDP
    β = 0.1."""
    return Scale({"task": "ldp-sgd", "dataset": "digits", "num-clients": 1, "min-clients": 1, "partition": "iid",
                  "model": "mlp", "rounds": rounds, "local-steps": steps, "batch-size": 64, "lr": 0.5,
                  "clip-norm": 1.0, "beta": 0.1, "sigma": 1.0, "delta": 1e-5, "seed": 0,
                  "membership-attack": "loss-threshold"}, {"perturbation": PERTURBATIONS})


def _judge(rows: Rows) -> Verdict:
    """The non-private model leaks (AUC above 0.5 by > 2 null SE); every private one does not (AUC ≤ 0.5 + 2 null
    SE); GeoDP's AUC is not above DP-SGD's by more than 2√2 null SE where both were run."""
    by = {r["perturbation"]: r for r in rows}
    lines, failed = [], []
    for name, r in by.items():
        bound = 0.5 + 2 * r["mia_auc_null_se"]
        leaks = r["mia_auc"] > bound
        ok = leaks if name == "none" else not leaks
        lines.append(f"{name}: AUC {r['mia_auc']:.4f} (coin flip 0.5 + 2 SE = {bound:.4f}), advantage "
                     f"{r['mia_advantage']:.3f}, accuracy {r['final_accuracy']:.3f}")
        failed += [] if ok else [name]
    if "none" not in by:
        failed.append("no non-private cell")
    if "geodp" in by and "dpsgd" in by:
        gap = by["geodp"]["mia_auc"] - by["dpsgd"]["mia_auc"]
        margin = 2 * math.hypot(by["geodp"]["mia_auc_null_se"], by["dpsgd"]["mia_auc_null_se"])
        lines.append(f"geodp − dpsgd AUC {gap:+.4f} (2 SE {margin:.4f})")
        failed += [] if gap <= margin else ["geodp above dpsgd"]
    head = f"fails at: {', '.join(failed)}. " if failed else ""
    return Verdict("not reproduced" if failed else "reproduced", head + "; ".join(lines))


def _groups(rows: Rows) -> Mapping[str, Mapping[str, tuple[float, float]]]:
    """Bars of the attack's AUC and advantage per trainer."""
    return {metric: {r["perturbation"]: (float(r[key]), float(r.get(f"{key}_null_se") or 0.0)) for r in rows}
            for metric, key in (("attack AUC", "mia_auc"), ("membership advantage", "mia_advantage"))}


def _plot(rows: Rows, path: Any, title: str) -> Any:
    return bars(_groups, ylabel="loss-threshold attack")(rows, path, title)


ENTRIES = [
    Entry(
        name="geodp-membership",
        source="Duan thesis ch. 5 (GeoDP), membership inference (Table 5.4)",
        chapter="Duan thesis ch. 5 §5.3",
        claim="A model trained with GeoDP (β = 0.1) resists membership inference as a DP-SGD-trained one does: the "
              "attack does no better than a coin flip on it, while it finds the members of the model trained "
              "without noise.",
        reduced="The source runs ML-Doctor's white-box attack (an auxiliary set of 70% of the training set) on its "
                "2-layer CNN, B = 64, 50 epochs, at ε ∈ {4.9, 11.3} on CelebA and FMNIST. Here: the loss-threshold "
                "attack (Yeom et al. 2018), digits (members: the 1,346 training images, non-members: the 451 test "
                "images), the MLP, B = 64, one client holding the whole training set, GeoDP at σ = 1 (its ε is in "
                "the row; not matched to the source's), DP-SGD at the same σ. small: 5 epochs; tiny: 5 steps; full: 50 "
                "epochs.",
        scales={"tiny": _scale(1, 5), "small": _scale(5), "full": _scale(50)},
        judge=_judge, plot=_plot, columns=_COLUMNS),
]
