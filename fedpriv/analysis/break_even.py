"""Population break-even between two mechanisms (docs/clt_utility_analyzer.md §5, Thesis Algorithm 3, corrected).

With mechanism, ε, m and data fixed, only r = nm/d moves with n, so each dimension's MSE is
MSE_j(n) = c_j/n + δ_j² with c_j = n·σ_j² (= s_j² d/m without the §3.4 term). Setting the two
curves equal gives n*_j = (c_B − c_A)/(δ_A² − δ_B²) (= r*_j · d/m). "A wins" means MSE_A < MSE_B:

=================  ======================  =============================
case               condition               A wins
=================  ======================  =============================
``equal-bias``     δ_A² = δ_B²             iff c_A < c_B, for every n
``b-always``       δ_A² > δ_B², c_A ≥ c_B  never
``a-below-n-star`` δ_A² > δ_B², c_A < c_B  iff n < n*
``a-always``       δ_A² < δ_B², c_A ≤ c_B  always
``a-above-n-star`` δ_A² < δ_B², c_A > c_B  iff n > n*
=================  ======================  =============================

The printed Algorithm 3 covers only ``a-below-n-star`` (A = Square Wave, B = Piecewise); its
prose contradicts it for a negative threshold (clt Ambiguity 11). The same rule applied to the
summed MSE gives the overall winner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["CASES", "BreakEven", "break_even_rule"]

CASES = ("equal-bias", "b-always", "a-below-n-star", "a-always", "a-above-n-star")


def break_even_rule(
    c_a: np.ndarray, bias2_a: np.ndarray, c_b: np.ndarray, bias2_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Case label (one of :data:`CASES`) and n* (NaN unless the ranks swap) for curves c/n + δ², elementwise."""
    c_a, bias2_a, c_b, bias2_b = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (c_a, bias2_a, c_b, bias2_b)))
    equal = np.isclose(bias2_a, bias2_b, rtol=1e-12, atol=0.0)
    a_more = bias2_a > bias2_b
    case = np.select(
        [equal, a_more & (c_a >= c_b), a_more, c_a <= c_b],
        list(CASES[:4]),
        default=CASES[4],
    )
    swaps = (case == "a-below-n-star") | (case == "a-above-n-star")
    gap = np.where(swaps, bias2_a - bias2_b, 1.0)
    n_star = np.where(swaps, (c_b - c_a) / gap, np.nan)  # clt §5: n* = r* d/m
    return case, n_star


def _winner_code(case: np.ndarray, n_star: np.ndarray, c_a: np.ndarray, c_b: np.ndarray, n: float) -> np.ndarray:
    """'a', 'b' or 'tie' per element at population n."""
    a_wins = np.select(
        [case == "equal-bias", case == "b-always", case == "a-below-n-star", case == "a-always"],
        [c_a < c_b, False, n < n_star, True],
        default=n > n_star,
    )
    tie = (case == "equal-bias") & (c_a == c_b)
    return np.where(tie, "tie", np.where(a_wins, "a", "b"))


def _label(code: np.ndarray, names: tuple[str, str]) -> np.ndarray:
    return np.where(code == "a", names[0], np.where(code == "b", names[1], "tie"))


@dataclass(frozen=True, eq=False)
class BreakEven:
    """Which of two analyses (A = ``names[0]``, B = ``names[1]``) has the lower MSE, and from which n on.

    Attributes
    ----------
    names : tuple of str
        Labels of A and B (mechanism names; suffixed " [A]"/" [B]" when equal).
    n : int
        Population at which ``winner`` and ``winner_total`` are evaluated (A's n).
    n_star : ndarray of shape (d,)
        Break-even population per dimension; NaN where the ranks never swap.
    case : ndarray of str, shape (d,)
        The branch of the corrected rule (module docstring) per dimension.
    winner : ndarray of str, shape (d,)
        The per-dimension winner at ``n`` ("tie" when the two curves coincide).
    n_star_total, case_total, winner_total
        The same for the summed MSE Σ_j (c_j/n + δ_j²).
    """

    names: tuple[str, str]
    n: int
    n_star: np.ndarray
    case: np.ndarray
    winner: np.ndarray
    n_star_total: float
    case_total: str
    winner_total: str
    curves: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(repr=False)

    @classmethod
    def from_curves(
        cls, names: tuple[str, str], n: int, c_a: np.ndarray, bias2_a: np.ndarray, c_b: np.ndarray, bias2_b: np.ndarray
    ) -> BreakEven:
        """Apply the §5 rule per dimension and to the sums; curves are MSE_j(n) = c_j/n + δ_j²."""
        case, n_star = break_even_rule(c_a, bias2_a, c_b, bias2_b)
        case_t, n_star_t = break_even_rule(c_a.sum(), bias2_a.sum(), c_b.sum(), bias2_b.sum())
        return cls(
            names=names,
            n=n,
            n_star=n_star,
            case=case,
            winner=_label(_winner_code(case, n_star, c_a, c_b, n), names),
            n_star_total=float(n_star_t),
            case_total=str(case_t),
            winner_total=str(_label(_winner_code(case_t, n_star_t, c_a.sum(), c_b.sum(), n), names)),
            curves=(c_a, bias2_a, c_b, bias2_b),
        )

    def winner_at(self, n: float) -> np.ndarray:
        """Per-dimension winner (names) at population ``n``."""
        c_a, _, c_b, _ = self.curves
        return _label(_winner_code(self.case, self.n_star, c_a, c_b, float(n)), self.names)

    def winner_total_at(self, n: float) -> str:
        """Winner on the summed MSE at population ``n``."""
        c_a, _, c_b, _ = self.curves
        code = _winner_code(np.asarray(self.case_total), np.asarray(self.n_star_total), c_a.sum(), c_b.sum(), float(n))
        return str(_label(code, self.names))
