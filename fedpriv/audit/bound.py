"""Empirical lower bound on ε from samples of a randomizer's output on two neighbouring inputs (docs/audit.md).

For any event S of the output, an (ε, δ) guarantee says P[M(x) ∈ S] ≤ e^ε P[M(x') ∈ S] + δ (and the
same with x and x' swapped), so every event gives ε ≥ ln((P[M(x) ∈ S] − δ) / P[M(x') ∈ S]). The two
probabilities are replaced by one-sided Clopper–Pearson bounds (exact binomial intervals; Clopper &
Pearson, Biometrika 1934): a lower bound on the numerator, an upper bound on the denominator, which
gives an ε lower bound valid with the stated confidence whatever the output law.

Procedure (:func:`epsilon_lower_bound`):

1. Each sample (one per input) is split in halves. On the first halves, the candidate events are the
   threshold events {s ≥ t} and {s < t} of the 1-D statistic s, for thresholds t at ``thresholds``
   quantiles of the pooled first halves, each in both directions (x over x' and x' over x).
2. The ``events`` candidates with the largest bound on the first halves are selected, that bound taken
   at the stricter level α/(8K) for K thresholds: the largest of many noisy scores favours rare events
   by chance, and the stricter level discounts them (the selection only decides power, never validity).
3. Only the selected events are evaluated on the held-out second halves, which the selection never
   saw; the level α = 1 − confidence is split by Bonferroni over the 2·``events`` one-sided
   Clopper–Pearson bounds (α/(2·events) each). With probability ≥ confidence every reported bound is
   below the true value, so a correct mechanism is called ``violated`` with probability ≤ α.

The result is a *lower* bound for the events tested: ``consistent`` means these samples could not
refute the claim, not that the claim is proven.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpriv._validation import check_int, check_positive, check_probability

__all__ = ["AuditResult", "clopper_pearson_lower", "clopper_pearson_upper", "epsilon_lower_bound"]

#: Verdicts: the samples do not refute the claim, or they refute it at the stated confidence.
CONSISTENT, VIOLATED = "consistent", "violated"


def clopper_pearson_lower(k: np.ndarray | int, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """One-sided lower Clopper–Pearson bound on a binomial p from k successes of n (level 1 − α); 0 where k = 0."""
    from scipy.stats import beta  # here: importing fedpriv.audit loads no SciPy

    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = beta.ppf(alpha, np.maximum(k, 1.0), n - k + 1.0)
    return np.where(k > 0, lo, 0.0)


def clopper_pearson_upper(k: np.ndarray | int, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """One-sided upper Clopper–Pearson bound on a binomial p from k successes of n (level 1 − α); 1 where k = n."""
    from scipy.stats import beta

    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1.0))
    return np.where(k < n, hi, 1.0)


def _log_ratio(p_lower: np.ndarray, q_upper: np.ndarray, delta: float) -> np.ndarray:
    """ln((p_lower − δ)/q_upper), −inf where p_lower ≤ δ (the event says nothing)."""
    num = p_lower - delta
    with np.errstate(divide="ignore"):
        return np.where(num > 0, np.log(np.maximum(num, 1e-300)) - np.log(q_upper), -np.inf)


@dataclass(frozen=True)
class AuditResult:
    """The audit's answer: ε_lb, the claim it was checked against, the confidence and the verdict.

    Attributes
    ----------
    epsilon_lb : float
        Empirical lower bound on ε (≥ 0), valid with probability ≥ ``confidence``.
    claimed_epsilon, delta : float
        The claim checked: P[M(x) ∈ S] ≤ e^ε P[M(x') ∈ S] + δ for every event S.
    confidence : float
        1 − α, the level of the bound (Bonferroni over the evaluated events and both bounds of each).
    verdict : str
        ``"violated"`` when ``epsilon_lb > claimed_epsilon`` (the claim is refuted at that confidence),
        else ``"consistent"``.
    event : str
        The held-out event that set ``epsilon_lb``, e.g. ``"P[s >= 0.97 | x] / P[s >= 0.97 | x']"``.
    p_lower, q_upper : float
        Its Clopper–Pearson bounds on the held-out halves (numerator lower, denominator upper).
    samples : int
        Outputs drawn per input (half select the events, half evaluate them).
    candidates : int
        Events examined on the selection halves.
    events : int
        Events evaluated on the held-out halves (the Bonferroni count).
    """

    epsilon_lb: float
    claimed_epsilon: float
    delta: float
    confidence: float
    verdict: str
    event: str
    p_lower: float
    q_upper: float
    samples: int
    candidates: int
    events: int

    def as_dict(self) -> dict[str, float | int | str]:
        """JSON-ready view."""
        return dict(self.__dict__)


def _counts(sorted_sample: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """How many values of a sorted sample are ≥ each threshold."""
    return sorted_sample.size - np.searchsorted(sorted_sample, thresholds, side="left")


def _candidates(a: np.ndarray, b: np.ndarray, thresholds: int) -> np.ndarray:
    """Distinct thresholds at ``thresholds`` interior quantiles of the pooled samples."""
    pooled = np.concatenate([a, b])
    levels = np.arange(1, thresholds + 1) / (thresholds + 1)
    return np.unique(np.quantile(pooled, levels, method="inverted_cdf"))


def _bounds(a: np.ndarray, b: np.ndarray, t: np.ndarray, alpha: float,
            delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate (tail × threshold × direction, flattened): the ε bound, p_lower, q_upper and counts."""
    sa, sb = np.sort(a), np.sort(b)
    above_a, above_b = _counts(sa, t), _counts(sb, t)
    na, nb = a.size, b.size
    # rows: {s ≥ t} x over x', {s ≥ t} x' over x, {s < t} x over x', {s < t} x' over x
    k_num = np.stack([above_a, above_b, na - above_a, nb - above_b])
    n_num = np.array([na, nb, na, nb])[:, None]
    k_den = np.stack([above_b, above_a, nb - above_b, na - above_a])
    n_den = np.array([nb, na, nb, na])[:, None]
    p_lo = clopper_pearson_lower(k_num, n_num, alpha)
    q_hi = clopper_pearson_upper(k_den, n_den, alpha)
    return _log_ratio(p_lo, q_hi, delta).ravel(), p_lo.ravel(), q_hi.ravel(), k_num.ravel()


_EVENT_TEXT = ("P[s >= {t:.4g} | x] / P[s >= {t:.4g} | x']", "P[s >= {t:.4g} | x'] / P[s >= {t:.4g} | x]",
               "P[s < {t:.4g} | x] / P[s < {t:.4g} | x']", "P[s < {t:.4g} | x'] / P[s < {t:.4g} | x]")


def epsilon_lower_bound(sample_x: np.ndarray, sample_x_prime: np.ndarray, *, claimed_epsilon: float,
                        delta: float = 0.0, confidence: float = 0.95, thresholds: int = 100,
                        events: int = 1) -> AuditResult:
    """Empirical ε lower bound and verdict from a 1-D statistic of outputs on x and on x' (module docstring).

    Parameters
    ----------
    sample_x, sample_x_prime : ndarray, shape (n,)
        The statistic of independent outputs M(x) and M(x'); at least 2 each (one per half).
    claimed_epsilon : float > 0
        The ε the mechanism claims (``inf`` is refused: there is nothing to refute).
    delta : float in [0, 1) (default: 0.0)
        The δ of an (ε, δ) claim: each event gives ε ≥ ln((P[M(x) ∈ S] − δ)/P[M(x') ∈ S]).
    confidence : float in (0, 1) (default: 0.95)
        Probability that ``epsilon_lb`` is below the true ε of the events tested.
    thresholds : int >= 1 (default: 100)
        Candidate thresholds (quantiles of the pooled selection halves).
    events : int >= 1 (default: 1)
        Events selected on the first halves and evaluated on the held-out halves (Bonferroni count).

    Examples
    --------
    >>> import numpy as np
    >>> from fedpriv.rng import stream
    >>> g = stream(0, 0, 0, "doc")
    >>> r = epsilon_lower_bound(g.random(20_000) < 0.73, g.random(20_000) < 0.27, claimed_epsilon=1.0)
    >>> r.verdict, 0.5 < r.epsilon_lb < 1.0
    ('consistent', True)
    """
    claimed = check_positive(claimed_epsilon, "claimed_epsilon")  # finite: an infinite claim cannot be refuted
    delta = check_probability(delta, "delta", low_open=False, high_open=True)
    confidence = check_probability(confidence, "confidence", high_open=True)
    thresholds = check_int(thresholds, "thresholds", minimum=1)
    events = check_int(events, "events", minimum=1)
    a, b = (_check_sample(s, name) for s, name in ((sample_x, "sample_x"), (sample_x_prime, "sample_x_prime")))
    alpha = 1.0 - confidence
    a_sel, a_eval = a[: a.size // 2], a[a.size // 2:]
    b_sel, b_eval = b[: b.size // 2], b[b.size // 2:]
    t = _candidates(a_sel, b_sel, thresholds)
    # scored at a strict level (step 2 of the module docstring): it decides power only, never validity
    score, _, _, _ = _bounds(a_sel, b_sel, t, alpha / (8.0 * t.size), delta)
    chosen = np.argsort(-score, kind="stable")[:events]  # the selection halves' best events
    held, p_lo, q_hi, _ = _bounds(a_eval, b_eval, t, alpha / (2.0 * events), delta)
    best = int(chosen[np.argmax(held[chosen])])
    eps_lb = max(0.0, float(held[best]))
    kind, threshold = divmod(best, t.size)
    return AuditResult(
        epsilon_lb=eps_lb, claimed_epsilon=claimed, delta=delta, confidence=confidence,
        verdict=VIOLATED if eps_lb > claimed else CONSISTENT, event=_EVENT_TEXT[kind].format(t=float(t[threshold])),
        p_lower=float(p_lo[best]), q_upper=float(q_hi[best]), samples=int(min(a.size, b.size)),
        candidates=int(score.size), events=events,
    )


def _check_sample(sample: np.ndarray, name: str) -> np.ndarray:
    """A finite 1-D float64 array of at least 2 values."""
    arr = np.asarray(sample)
    if arr.dtype == bool:
        arr = arr.astype(np.float64)
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise TypeError(f"{name} must be a real-valued array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be 1-D with at least 2 values (one per half), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got {int((~np.isfinite(arr)).sum())} NaN/inf value(s)")
    return arr
