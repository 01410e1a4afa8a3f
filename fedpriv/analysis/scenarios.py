"""The worked case study of docs/clt_utility_analyzer.md §8, as named scenarios.

Setting common to [Conf] and [Thesis]: d = 100, n = 10 000, m = 100 (so r = 10 000); every
dimension takes the values 0.1, 0.2, …, 1.0 with probability 0.1 each; Piecewise on [-1, 1] and
Square Wave on its native [0, 1].

* :func:`case_study_conf` — ε = 0.1, so ε' = 0.001 (both sources).
* :func:`case_study_thesis_mse` — ε' = 1 (ε = 100), the budget the thesis's MSE/break-even variant
  silently uses (clt Ambiguity 10). The PM variance is the corrected one, so its numbers differ from
  the thesis's misprinted ones; the project's private reference file records the discrepancy.

Reference values are kept by the project, not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.analysis.break_even import BreakEven
from fedpriv.analysis.mean import AnalysisResult, DiscreteData, analyze_mean

__all__ = ["CASE_XI", "CaseStudy", "case_study", "case_study_conf", "case_study_thesis_mse"]

CASE_XI = (0.001, 0.01, 0.05, 0.1)
CASE_D, CASE_N, CASE_M = 100, 10_000, 100
CASE_DATA = DiscreteData(values=np.arange(1, 11) / 10.0, probs=np.full(10, 0.1))


@dataclass(frozen=True, eq=False)
class CaseStudy:
    """PM and SW analyses of one case-study setting, with the §8 table and break-even.

    Attributes
    ----------
    name : str
    pm, sw : AnalysisResult
    xi : tuple of float
        Tolerances of the table.
    prob_table : dict of str to ndarray of shape (len(xi),)
        P(|D_1| ≤ ξ) per mechanism (every dimension is alike), correct asymmetric limits (§4 item 2).
    break_even : BreakEven
        A = Square Wave (biased, low variance), B = Piecewise (unbiased), as in Algorithm 3.
    """

    name: str
    pm: AnalysisResult
    sw: AnalysisResult
    xi: tuple[float, ...]
    prob_table: dict[str, np.ndarray]
    break_even: BreakEven

    def table(self) -> str:
        """The P(|D_1| ≤ ξ) table as aligned text, with the MSEs and the break-even n*."""
        head = "xi        " + "".join(f"{x:>12g}" for x in self.xi)
        rows = [f"{k:<10}" + "".join(f"{p:>12.6f}" for p in v) for k, v in self.prob_table.items()]
        be = self.break_even
        tail = (
            f"MSE: piecewise {self.pm.mse():.6g}, square_wave {self.sw.mse():.6g}; "
            f"break-even n* = {be.n_star_total:.6g} ({be.case_total}), winner at n={be.n}: {be.winner_total}"
        )
        return "\n".join([f"[{self.name}]", head, *rows, tail])


def case_study(epsilon: float, name: str) -> CaseStudy:
    """Run the §8 procedure (steps 1–4) with total budget ``epsilon`` (ε' = ε/100)."""
    common: dict[str, Any] = dict(n=CASE_N, d=CASE_D, m=CASE_M, data=CASE_DATA)
    pm = analyze_mean("piecewise", epsilon, **common)  # step 1: δ = 0, s² = mean of v_PM over the 10 values
    sw = analyze_mean("square_wave", epsilon, mechanism_params={"domain": "unit"}, **common)  # step 2
    xi = np.asarray(CASE_XI)[:, None]  # (len(xi), 1) against (d,): step 3, dimension 1
    table = {"piecewise": pm.prob_within(xi)[:, 0], "square_wave": sw.prob_within(xi)[:, 0]}
    return CaseStudy(name, pm, sw, CASE_XI, table, sw.break_even(pm))  # steps 3–4


def case_study_conf() -> CaseStudy:
    """[Conf]/[Thesis] case study: ε = 0.1, ε' = 0.001."""
    return case_study(0.1, "case_study_conf")


def case_study_thesis_mse() -> CaseStudy:
    """[Thesis] MSE/break-even variant: ε' = 1 (ε = 100), everything else as in the case study."""
    return case_study(float(CASE_M), "case_study_thesis_mse")
