"""Reproductions of federated LDP-SGD (Duan's thesis ch. 6 §6.1, §6.3): the mechanisms' ranking and the client count.

The ldp-sgd workload runs them on scikit-learn's digits with logistic regression (docs/federated_ldp_sgd.md):
N clients with two classes each, E local steps per round of which only the last is privatized (the
source's schedule, ``noise-schedule = "last_step"``: the E − 1 clean steps are covered by no guarantee),
coordinatewise perturbation with ε per client per round split over the d coordinates (``budget-mode = "split"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from simulations.reproduce.entry import Entry, Rows, Scale, Verdict, grouped, with_grid
from simulations.reproduce.figures import lines
from simulations.reproduce.judging import metric_lines, monotone

__all__ = ["COLUMNS", "ENTRIES", "federated", "only", "ranked"]

_SOURCE = "Duan thesis ch. 6"
COLUMNS = ("perturbation", "mechanism", "epsilon_per_round", "epsilon_total", "final_accuracy",
           "best_accuracy", "final_test_loss", "rounds")

#: The MNIST setup of the source (N = 500, B = 32, C = 0.1, T = 500) shrunk to digits: the base every entry shares.
_BASE: dict[str, Any] = {"task": "ldp-sgd", "dataset": "digits", "partition": "classes", "classes-per-client": 2,
                         "model": "lr", "local-steps": 5, "batch-size": 16, "lr": 1.0, "clip-norm": 1.0,
                         "delta": 1e-5, "seed": 0, "noise-schedule": "last_step", "budget-mode": "split"}


def federated(clients: int, rounds: int, grid: Mapping[str, Sequence[Any]], **base: Any) -> Scale:
    """A federated LDP-SGD sweep on digits: ``clients`` clients, ``rounds`` rounds, the shared base and ``base``."""
    return Scale({**_BASE, "num-clients": clients, "rounds": rounds, **base}, grid)



def only(judge: Callable[[Rows], Verdict], key: str, *, excluded: Any) -> Callable[[Rows], Verdict]:
    """``judge`` applied to the rows (grid values added) whose ``key`` is not ``excluded``."""

    def filtered(rows: Rows) -> Verdict:
        return judge([r for r in with_grid(rows) if r[key] != excluded])

    return filtered


def ranked(metric: str, method_key: str, order: Sequence[str], *, by: str) -> Callable[[Rows], Verdict]:
    """``metric`` ordered as ``order`` (lowest first) at every value of ``by``: each neighbour strictly below the next."""

    def judge(rows: Rows) -> Verdict:
        lines_, failed = [], []
        for where, rs in grouped(rows, method_key, by).items():
            values = {r[method_key]: float(r[metric]) for r in rs if r[method_key] in order}
            if len(values) < len(order):
                continue
            ok = all(values[a] < values[b] for a, b in zip(order, order[1:], strict=False))
            shown = " < ".join(f"{m} {values[m]:.4g}" for m in sorted(values, key=values.__getitem__))
            lines_.append(f"{by} = {where:g}: {shown}" + ("" if ok else f" (not {' < '.join(order)})"))
            failed += [] if ok else [where]
        if not lines_:
            return Verdict("not reproduced", f"no value of {by} holds all of {', '.join(order)}")
        return Verdict("not reproduced" if failed else "reproduced", "; ".join(lines_))

    return judge


def _finite(judge: Callable[[Rows], Verdict], metric: str) -> Callable[[Rows], Verdict]:
    """``judge``, with a diverged cell (``metric`` not finite) counted as the worst value rather than dropped."""

    def checked(rows: Rows) -> Verdict:
        return judge([{**r, metric: r[metric] if math.isfinite(float(r[metric])) else math.inf} for r in rows])

    return checked


_MECHANISMS = ("gaussian", "piecewise", "laplace")

ENTRIES = [
    Entry(
        name="fedldp-mechanisms",
        source=f"{_SOURCE} §6.1.4 and §6.3, the mechanisms' ranking (LR on MNIST; digits here)",
        chapter=_SOURCE,
        claim="Among the numeric perturbations of the noisy local step, Gaussian is best, then Piecewise, then "
              "Laplace (the framework's ranking by the expected deviation of the aggregated model, which the "
              "source says tracks training utility); here: the final test loss ordered Gaussian < Piecewise < "
              "Laplace at every ε per round.",
        reduced="digits (1,347 training images, 64 pixels, d = 650) instead of MNIST (d = 785 in the source's "
                "binary task); E = 5 (source 20 or 50), B = 16 (32), C = 1 (0.1), η = 1 constant (η0/(1+t)). "
                "small: N = 50 clients (source 500), 15 rounds, ε ∈ {1.5, 15.3}; tiny: N = 10, 2 rounds, ε = 15.3.",
        notes="The metric is the test loss of the global model, not the source's global training loss. Only the "
              "5th local step is privatized (the source's schedule): the upload is not an ε-LDP release.",
        scales={"tiny": federated(10, 2, {"epsilon": (15.3,), "mechanism": _MECHANISMS},
                                  perturbation="coordinatewise"),
                "small": federated(50, 15, {"epsilon": (1.5, 15.3), "mechanism": _MECHANISMS},
                                   perturbation="coordinatewise"),
                "full": federated(500, 100, {"epsilon": (1.5, 4.9, 15.3, 48.5), "mechanism": _MECHANISMS},
                                  perturbation="coordinatewise", **{"local-steps": 20})},
        judge=_finite(ranked("final_test_loss", "mechanism", _MECHANISMS, by="epsilon_per_round"), "final_test_loss"),
        plot=lines(metric_lines("final_test_loss", "epsilon_per_round", "mechanism"), xlabel="ε per client per round",
                   ylabel="final test loss"),
        columns=COLUMNS),
    Entry(
        name="fedldp-clients",
        source=f"{_SOURCE} §6.1.3 (Theorem 12, Corollary 3), the number of clients N (LR on MNIST; digits here)",
        chapter=_SOURCE,
        claim="The aggregated LDP noise of a round has variance proportional to Σ p_k² = 1/N, so at the same ε per "
              "round more clients give a better model; here: the final test loss of coordinatewise Gaussian "
              "(ε = 4.9 per round) falls from the fewest to the most clients, beyond 2 SE.",
        reduced="digits instead of MNIST, so more clients means fewer images each (the noise-free cells at each N "
                "show what that alone does); small: N ∈ {10, 30, 100} (source 500 and 1,000), 15 rounds; tiny: "
                "N ∈ {5, 10}, 2 rounds, no noise-free cells. Other settings as fedldp-mechanisms.",
        notes="Single runs: the standard error of a cell is 0, so the judge asks for a strictly lower loss.",
        scales={"tiny": federated(10, 2, {"num-clients": (5, 10), "perturbation": ("coordinatewise",)},
                                  mechanism="gaussian", epsilon=4.9),
                "small": federated(50, 15, {"num-clients": (10, 30, 100), "perturbation": ("coordinatewise", "none")},
                                   mechanism="gaussian", epsilon=4.9),
                "full": federated(500, 100, {"num-clients": (100, 500, 1000),
                                             "perturbation": ("coordinatewise", "none")},
                                  mechanism="gaussian", epsilon=4.9, **{"local-steps": 20})},
        judge=only(monotone("final_test_loss", "num-clients", increasing=False), "perturbation", excluded="none"),
        plot=lines(lambda rows: metric_lines("final_test_loss", "num-clients", "perturbation")(with_grid(rows)),
                   xlabel="N (clients)", ylabel="final test loss"),
        columns=COLUMNS),
]
