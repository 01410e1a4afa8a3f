"""Server-side defences (normbound, bulyan, centeredclip): math against loop references, robustness, refusals."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedpriv.federated.aggregate import AGGREGATORS, aggregate, assumption_violation


def _updates(k: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(k, d))


def _brute_bulyan(u: np.ndarray, f: int) -> np.ndarray:
    """El Mhamdi et al. 2018, Algorithm 1, by loops: θ = K − 2f Krum picks, then per coordinate the β = θ − 2f
    values closest to the median of the picks, averaged (Krum over the rows left, K' − f − 2 neighbours, >= 1)."""
    k, d = u.shape
    left, picked = list(range(k)), []
    for _ in range(k - 2 * f):
        m = max(len(left) - f - 2, 1)
        best, best_score = None, None
        for i in left:
            dists = sorted(float(np.sum((u[i] - u[j]) ** 2)) for j in left if j != i)
            score = sum(dists[:m])
            if best_score is None or score < best_score:
                best, best_score = i, score
        picked.append(best)
        left.remove(best)
    sel = u[sorted(picked)]
    beta = len(picked) - 2 * f
    out = np.empty(d)
    for j in range(d):
        col = sel[:, j]
        med = float(np.median(col))
        order = sorted(range(len(col)), key=lambda r: (abs(col[r] - med), r))
        out[j] = float(np.mean([col[r] for r in order[:beta]]))
    return out


def _brute_centered_clip(deltas: np.ndarray, start: np.ndarray, tau: float, iters: int) -> np.ndarray:
    """Karimireddy et al. 2021, eq. (CC), by loops over iterations and clients."""
    v = start.astype(float).copy()
    for _ in range(iters):
        step = np.zeros_like(v)
        for x in deltas:
            norm = float(np.sqrt(np.sum((x - v) ** 2)))
            step += (x - v) * (1.0 if norm == 0 else min(1.0, tau / norm))
        v = v + step / len(deltas)
    return v


# --------------------------------------------------------------------------- math


def test_normbound_by_hand():
    ref = np.array([1.0, 1.0])
    u = ref + np.array([[3.0, 4.0], [0.0, 0.5], [0.0, 0.0]])  # norms 5 (clipped to 1), 0.5, 0 (a zero update)
    out = aggregate(u, np.array([1.0, 1.0, 2.0]), "normbound", reference=ref, clip_norm=1.0)
    # ([0.6, 0.8]·1 + [0, 0.5]·1 + [0, 0]·2) / 4
    np.testing.assert_allclose(out, [1.15, 1.325], rtol=1e-15)


@pytest.mark.parametrize("k, clip", [(1, 0.5), (6, 2.0), (13, 100.0)])
def test_normbound_matches_a_loop(k, clip):
    u, ref = _updates(k, 5, seed=k) * 2, _updates(1, 5, seed=99)[0]
    w = np.random.default_rng(k).integers(1, 9, size=k).astype(float)
    clipped = [(x - ref) * min(1.0, clip / float(np.linalg.norm(x - ref))) for x in u]
    expected = ref + sum(wi * c for wi, c in zip(w, clipped)) / w.sum()
    np.testing.assert_allclose(aggregate(u, w, "normbound", reference=ref, clip_norm=clip), expected, rtol=1e-12)


def test_bulyan_with_no_attacker_assumed_is_the_mean():
    u = _updates(5, 4, seed=3)  # f = 0: θ = K picks, β = K values per coordinate
    np.testing.assert_allclose(aggregate(u, np.ones(5), "bulyan"), u.mean(axis=0), rtol=1e-12)


@pytest.mark.parametrize("k, f", [(3, 0), (7, 1), (8, 1), (11, 2), (16, 3)])
def test_bulyan_matches_the_loop_reference(k, f):
    u = _updates(k, 6, seed=11 * k + f) + 50.0  # far from the origin: the centred Gram trick stays exact
    np.testing.assert_allclose(aggregate(u, np.ones(k), "bulyan", num_malicious=f), _brute_bulyan(u, f), rtol=1e-12)


def test_centered_clip_by_hand():
    u, ref = np.array([[0.0], [0.0], [10.0]]), np.zeros(1)
    # L = 1 from 0: differences 0, 0, 10 -> clipped 0, 0, 1 -> v = 1/3
    np.testing.assert_allclose(aggregate(u, np.ones(3), "centeredclip", reference=ref, cc_tau=1.0), [1 / 3])
    # L = 2: differences −1/3, −1/3, 29/3 -> clipped −1/3, −1/3, 1 -> v = 1/3 + (1/3)/3 = 4/9
    np.testing.assert_allclose(aggregate(u, np.ones(3), "centeredclip", reference=ref, cc_tau=1.0, cc_iters=2),
                               [4 / 9], rtol=1e-15)
    # from the start point 5: differences −5, −5, 5 -> clipped −1, −1, 1 -> v = 5 − 1/3
    np.testing.assert_allclose(aggregate(u, np.ones(3), "centeredclip", reference=ref, cc_tau=1.0,
                                         state=np.array([5.0])), [14 / 3], rtol=1e-15)


@pytest.mark.parametrize("k, tau, iters", [(1, 0.3, 1), (5, 0.5, 3), (12, 2.0, 5), (9, 1e9, 1)])
def test_centered_clip_matches_the_loop_reference(k, tau, iters):
    u, ref, start = _updates(k, 7, seed=k), _updates(1, 7, seed=50)[0], _updates(1, 7, seed=51)[0] * 0.1
    out = aggregate(u, np.ones(k), "centeredclip", reference=ref, cc_tau=tau, cc_iters=iters, state=start)
    np.testing.assert_allclose(out, ref + _brute_centered_clip(u - ref, start, tau, iters), rtol=1e-12, atol=1e-14)


def test_centered_clip_with_a_huge_radius_is_the_mean():
    u, ref = _updates(6, 3, seed=2), np.ones(3)
    np.testing.assert_allclose(aggregate(u, np.ones(6), "centeredclip", reference=ref, cc_tau=1e12, cc_iters=4),
                               u.mean(axis=0), rtol=1e-12)


# --------------------------------------------------------------------------- robustness

N_HONEST, F, D, SPREAD = 16, 3, 20, 0.05
K = N_HONEST + F


def _honest() -> np.ndarray:
    """16 honest updates around μ = 0.5·1 (the global model is 0, so the updates are the deltas)."""
    return 0.5 + SPREAD * _updates(N_HONEST, D, seed=7)


def _attackers(kind: str) -> np.ndarray:
    like = 0.5 + SPREAD * _updates(F, D, seed=8)  # what an honest client would have sent
    return -10.0 * like if kind == "sign-flip" else 1e4 * like


@pytest.mark.parametrize("attack", ["sign-flip", "scaling"])
def test_robust_rules_stay_near_the_honest_mean_while_fedavg_does_not(attack):
    h = _honest()
    u = np.vstack([h, _attackers(attack)])
    hbar = h.mean(axis=0)
    r_vec = np.abs(h - hbar).max(axis=0)  # per-coordinate honest range around the mean
    r = float(np.linalg.norm(h - hbar, axis=1).max())  # largest honest distance to the mean
    tau = clip = 3.0
    assert float(np.linalg.norm(h, axis=1).max()) <= clip and r + float(np.linalg.norm(hbar)) <= tau  # no honest clip
    # Derived bounds (attackers far from every honest update):
    # - median, trimmed mean (⌊0.2·19⌋ = 3 >= f), Bulyan (its θ = K − 2f picks are honest): every coordinate of the
    #   result lies within the honest values of that coordinate -> ‖out − h̄‖ <= ‖r_vec‖;
    # - Krum picks an honest update, Multi-Krum averages the K − f = 16 honest ones -> <= r;
    # - normbound (uniform weights): out − h̄ = (1/K)Σ_a clip(a) − (f/(K·n))Σ_h h -> <= 2fC/K;
    # - centeredclip from 0 while honest differences stay within τ: e_{l+1} <= (f/K) e_l + fτ/K, e_0 = ‖h̄‖.
    e = float(np.linalg.norm(hbar))
    cc_bounds = []
    for _ in range(3):
        e = F / K * e + F * tau / K
        assert r + e <= tau  # the honest updates stay unclipped at the next iteration (the bound's premise)
        cc_bounds.append(e)
    bounds = {"fedmedian": float(np.linalg.norm(r_vec)), "fedtrimmedavg": float(np.linalg.norm(r_vec)),
              "bulyan": float(np.linalg.norm(r_vec)), "krum": r, "multikrum": r, "normbound": 2 * F * clip / K,
              "centeredclip": cc_bounds[-1]}
    kw = {"num_malicious": F, "reference": np.zeros(D), "clip_norm": clip, "cc_tau": tau, "cc_iters": 3}
    for rule, bound in bounds.items():
        dist = float(np.linalg.norm(aggregate(u, np.ones(K), rule, **kw) - hbar))
        assert dist <= bound, (rule, dist, bound)
    fedavg = float(np.linalg.norm(aggregate(u, np.ones(K), "fedavg") - hbar))
    assert fedavg > max(bounds.values()) * 3, fedavg
    np.testing.assert_allclose(aggregate(u, np.ones(K), "multikrum", num_malicious=F), hbar, rtol=1e-12)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "strategy, k, f, beta, match",
    [
        ("fedavg", 3, 5, 0.2, None),  # the undefended baseline: no assumption
        ("fedmedian", 5, 2, 0.2, None),
        ("fedmedian", 4, 2, 0.2, r"fedmedian with num-malicious=2 needs an honest majority.*more than 4 updates, got 4"),
        ("normbound", 3, 1, 0.2, None),
        ("normbound", 2, 1, 0.2, "normbound with num-malicious=1 needs an honest majority"),
        ("centeredclip", 6, 3, 0.2, "centeredclip with num-malicious=3 needs an honest majority"),
        ("fedtrimmedavg", 10, 2, 0.2, None),
        ("fedtrimmedavg", 9, 2, 0.2, r"floor\(trim-beta \* updates\) >= num-malicious, got floor\(0.2 \* 9\) = 1"),
        ("fedtrimmedavg", 10, 1, 0.0, r"raise trim-beta to at least 1/10"),
        ("krum", 5, 1, 0.2, None),
        ("krum", 4, 1, 0.2, r"krum with num-malicious=1 needs more than 2\*num_malicious \+ 2 = 4 updates, got 4"),
        ("multikrum", 6, 2, 0.2, "multikrum with num-malicious=2 needs more than"),
        ("bulyan", 11, 2, 0.2, None),
        ("bulyan", 10, 2, 0.2, r"bulyan with num-malicious=2 needs at least 4\*num_malicious \+ 3 = 11 updates, got 10"),
    ],
)
def test_each_rule_states_and_enforces_its_assumption(strategy, k, f, beta, match):
    violation = assumption_violation(strategy, k, f, beta)
    kw = {"num_malicious": f, "trim_beta": beta, "reference": np.zeros(2)}
    if match is None:
        assert violation is None
        aggregate(_updates(k, 2), np.ones(k), strategy, **kw)
    else:
        assert violation is not None and re.search(match, violation), violation
        with pytest.raises(ValueError, match=match):
            aggregate(_updates(k, 2), np.ones(k), strategy, **kw)


def test_every_rule_has_a_stated_assumption():
    # with K = 2 updates and f = 1 every rule but the undefended FedAvg refuses
    refused = {s for s in AGGREGATORS if assumption_violation(s, 2, 1, 0.2) is not None}
    assert refused == set(AGGREGATORS) - {"fedavg"}


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"strategy": "normbound"}, ValueError, r"normbound needs reference, the current global model of shape \(2,\)"),
        ({"strategy": "centeredclip", "reference": np.zeros(3)}, ValueError, r"reference must be .* shape \(2,\)"),
        ({"strategy": "normbound", "reference": np.array([0.0, np.nan])}, ValueError, "reference must be finite"),
        ({"strategy": "normbound", "reference": np.zeros(2), "clip_norm": 0.0}, ValueError, "clip_norm must be > 0"),
        ({"strategy": "centeredclip", "reference": np.zeros(2), "cc_tau": -1.0}, ValueError, "cc_tau must be > 0"),
        ({"strategy": "centeredclip", "reference": np.zeros(2), "cc_iters": 0}, ValueError, "cc_iters must be >= 1"),
        ({"strategy": "centeredclip", "reference": np.zeros(2), "state": np.ones(1)}, ValueError,
         r"state must be .* shape \(2,\)"),
    ],
)
def test_bad_parameters(kwargs, exc, match):
    strategy = kwargs.pop("strategy")
    with pytest.raises(exc, match=match):
        aggregate(_updates(3, 2), np.ones(3), strategy, **kwargs)
