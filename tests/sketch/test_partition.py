"""MemEnc = DPFMPS-Gen (docs/vertical_kmeans.md §6, §5.4, §19 items 3, 4, 12): merge, phantoms, a DP audit,
datasketch references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from datasketch import HyperLogLog, MinHash

from fedpriv.sketch import (
    DpfmParams,
    HashKey,
    cardinality,
    cluster_minima,
    kappa,
    partition_sketch,
)
from tests.sketch.test_dpfm import chisquare_pvalue
from tests.sketch.test_estimator import exact_law

KEY = HashKey(bytes(range(32)))
C_GAMMA1 = 1.039  # relative std ·√M of the harmonic-mean estimator at γ = 1 (exact law, test_estimator)


def overlapping_sets(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ids of A (3000) and B (3000) with |A ∩ B| = 1500, |A ∪ B| = 4500."""
    ids = np.random.default_rng(seed).choice(10**12, size=4500, replace=False)
    return ids[:3000], ids[1500:]


# ---------------------------------------------------------------------------------------------
# §19 item 4: merge property (exact, non-private)


@pytest.mark.parametrize("backend", ["prf", "datasketch"])
def test_sketch_of_a_union_is_the_max_of_the_sketches(backend: str) -> None:
    params = DpfmParams(M=512)
    a, b = overlapping_sets()
    rng = np.random.default_rng(0)  # unused in non-private mode
    sk = {name: partition_sketch(ids, np.zeros(len(ids), dtype=int), 1, KEY, params, rng, backend=backend)
          for name, ids in (("a", a), ("b", b), ("union", np.union1d(a, b)))}
    assert np.array_equal(sk["union"], np.maximum(sk["a"], sk["b"]))


def test_merging_clusters_is_the_max_over_their_columns() -> None:
    params = DpfmParams(M=256)
    rng = np.random.default_rng(1)
    ids = rng.choice(10**9, size=2000, replace=False)
    labels = rng.integers(0, 4, size=2000)
    sketch = partition_sketch(ids, labels, 4, KEY, params, rng)
    merged = partition_sketch(ids, np.where(labels == 1, 0, labels), 4, KEY, params, rng)
    assert np.array_equal(merged[:, 0], sketch[:, [0, 1]].max(axis=1))
    assert np.all(merged[:, 1] == 0)  # now empty: register 0 in non-private mode (§5.2)
    assert np.array_equal(merged[:, 2:], sketch[:, 2:])


def test_parties_with_the_same_key_agree_and_phantoms_are_party_local() -> None:
    ids = np.arange(500) * 11
    labels = ids % 3
    nonpriv = DpfmParams(M=128)
    party1 = partition_sketch(ids, labels, 3, HashKey(bytes(range(32))), nonpriv, np.random.default_rng(1))
    party2 = partition_sketch(ids[::-1], labels[::-1], 3, HashKey(bytes(range(32))), nonpriv,
                              np.random.default_rng(2))
    assert np.array_equal(party1, party2)  # R1: the hash part is shared
    priv = DpfmParams(M=128, epsilon=0.5, delta=1e-5)
    s1 = partition_sketch(ids, labels, 3, KEY, priv, np.random.default_rng(1))
    assert np.array_equal(s1, partition_sketch(ids, labels, 3, KEY, priv, np.random.default_rng(1)))
    assert not np.array_equal(s1, partition_sketch(ids, labels, 3, KEY, priv, np.random.default_rng(2)))


# ---------------------------------------------------------------------------------------------
# §19 item 3 through the whole pipeline: with phantoms, card − n_p is unbiased


def floored_law_moments(n_total: int, gamma: float, alpha_min: int, M: int) -> tuple[float, float]:
    """Exact mean (to O(1/M)) and sd of ``hm_corrected`` for registers max(r, α_min), r of n_total elements."""
    z, p = exact_law(n_total, gamma)
    y = (1.0 + gamma) ** -np.maximum(z, alpha_min).astype(float)
    mu, c2 = float(p @ y), float(p @ y**2) / float(p @ y) ** 2 - 1.0
    return kappa(gamma) / mu * (1 + c2 / M), kappa(gamma) / mu * math.sqrt(c2 / M)


def test_private_sketch_estimates_cluster_sizes_after_subtracting_phantoms() -> None:
    params = DpfmParams(M=1024, gamma=1.0, epsilon=0.87, delta=1e-5)
    n_p = params.n_p
    assert 400 <= n_p <= 600 and params.alpha_min == 9
    k, N = 16, 2000
    ids = np.arange(k * N) * 3 + 1
    sketch = partition_sketch(ids, np.repeat(np.arange(k), N), k + 16, KEY, params, np.random.default_rng(7))
    assert sketch.shape == (1024, k + 16) and sketch.min() >= params.alpha_min
    est = cardinality(sketch, params.gamma) - n_p
    # 16 clusters of N ids: card − n_p ≈ N + 1, the floor is negligible (Lemma 8)
    mean, sd = floored_law_moments(N + n_p, params.gamma, params.alpha_min, params.M)
    assert mean - n_p == pytest.approx(N + 1, rel=2e-3)
    assert abs(est[:k].mean() - (mean - n_p)) <= 5 * sd / math.sqrt(k)
    # 16 empty clusters: only phantoms, but the floor α_min ≈ log2(n_p) lifts about a third of the
    # registers, so card − n_p is biased upward by about n_p/3 (Lemma 8 only holds for large sets)
    mean, sd = floored_law_moments(n_p, params.gamma, params.alpha_min, params.M)
    assert 0.2 * n_p <= mean - n_p <= 0.5 * n_p
    assert abs(est[k:].mean() - (mean - n_p)) <= 5 * sd / math.sqrt(16)


# ---------------------------------------------------------------------------------------------
# DP audit: one register, neighbouring sets (one id added), likelihood ratio <= e^{ε'}


AUDIT_EPS_PRIME = 0.5
AUDIT_DELTA = 0.01
TRIALS = 40_000
Z_CONF = 5.0


def audit_params(private: bool) -> DpfmParams:
    """M = 1 so that ε' = ε/(4√ln(1/δ)) is large (0.5) and the audit has power; n_p = 2, α_min = 2."""
    if not private:
        return DpfmParams(M=1)
    return DpfmParams(M=1, gamma=1.0, epsilon=AUDIT_EPS_PRIME * 4 * math.sqrt(math.log(1 / AUDIT_DELTA)),
                      delta=AUDIT_DELTA)


def one_register_per_trial(N: int, params: DpfmParams, key_byte: int, seed: int) -> np.ndarray:
    """TRIALS independent registers of N-element sets (one cluster per trial, fresh ids and key)."""
    ids = np.arange(TRIALS * N)
    labels = np.repeat(np.arange(TRIALS), N)
    key = HashKey(bytes([key_byte]) * 32)
    return partition_sketch(ids, labels, TRIALS, key, params, np.random.default_rng(seed))[0].astype(np.int64)


def wilson(count: np.ndarray, n: int, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion (valid at counts of 0 too)."""
    p = count / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return centre - half, centre + half


def ratio_lower_bound(x: np.ndarray, y: np.ndarray) -> float:
    """Largest lower confidence bound of P_x(z)/P_y(z) or P_y(z)/P_x(z) over the output values z."""
    size = int(max(x.max(), y.max())) + 1
    lo_x, hi_x = wilson(np.bincount(x, minlength=size), len(x), Z_CONF)
    lo_y, hi_y = wilson(np.bincount(y, minlength=size), len(y), Z_CONF)
    return float(max(np.max(lo_x / hi_y), np.max(lo_y / hi_x)))


@pytest.mark.parametrize("N", [0, 1, 4])
def test_dp_audit_private_register_respects_eps_prime(N: int) -> None:
    params = audit_params(private=True)
    assert params.eps_prime == pytest.approx(AUDIT_EPS_PRIME)
    assert (params.n_p, params.alpha_min) == (2, 2)
    x = one_register_per_trial(N, params, 1, seed=10 + N)
    y = one_register_per_trial(N + 1, params, 2, seed=20 + N)  # neighbour: one more id
    assert ratio_lower_bound(x, y) <= math.exp(AUDIT_EPS_PRIME)
    # and the registers follow the exact law max(T(min of N + n_p uniforms), α_min)
    z = np.arange(80)
    for regs, n_real in ((x, N), (y, N + 1)):
        cdf = np.where(z >= params.alpha_min, (1 - 2.0**-z) ** (n_real + params.n_p), 0.0)
        assert chisquare_pvalue(regs, cdf) > 1e-6


@pytest.mark.parametrize("N", [0, 1])
def test_dp_audit_non_private_register_fails(N: int) -> None:
    params = audit_params(private=False)
    x = one_register_per_trial(N, params, 1, seed=30 + N)
    y = one_register_per_trial(N + 1, params, 2, seed=40 + N)
    assert ratio_lower_bound(x, y) > math.exp(AUDIT_EPS_PRIME)


# ---------------------------------------------------------------------------------------------
# §19 item 4: datasketch references (HyperLogLog union counts, MinHash Jaccard)


def test_union_count_agrees_with_hyperloglog() -> None:
    a, b = overlapping_sets(1)
    M = 4096
    params = DpfmParams(M=M)
    rng = np.random.default_rng(0)
    sk_a = partition_sketch(a, np.zeros(len(a), dtype=int), 1, KEY, params, rng)
    sk_b = partition_sketch(b, np.zeros(len(b), dtype=int), 1, KEY, params, rng)
    ours = cardinality(np.maximum(sk_a, sk_b), params.gamma)[0]
    hll_a, hll_b = HyperLogLog(p=12), HyperLogLog(p=12)
    for hll, ids in ((hll_a, a), (hll_b, b)):
        for i in ids.tolist():
            hll.update(i.to_bytes(8, "little"))
    hll_a.merge(hll_b)
    theirs = hll_a.count()
    sd_ours, sd_hll = C_GAMMA1 * 4500 / math.sqrt(M), 1.04 * 4500 / math.sqrt(2**12)
    assert abs(ours - 4501) <= 5 * sd_ours
    assert abs(ours - theirs) <= 5 * math.hypot(sd_ours, sd_hll)


def test_minwise_jaccard_of_the_prf_agrees_with_datasketch_minhash() -> None:
    """The prf's per-repetition minima are a MinHash: P(min_A = min_B) = J(A, B) = 1/3."""
    a, b = overlapping_sets(2)
    M, perms = 4096, 1024
    min_a = cluster_minima(KEY, a, np.zeros(len(a), dtype=int), 1, M)
    min_b = cluster_minima(KEY, b, np.zeros(len(b), dtype=int), 1, M)
    ours = float(np.mean(min_a == min_b))
    mh_a, mh_b = MinHash(num_perm=perms), MinHash(num_perm=perms)
    mh_a.update_batch([i.to_bytes(8, "little") for i in a.tolist()])
    mh_b.update_batch([i.to_bytes(8, "little") for i in b.tolist()])
    theirs = mh_a.jaccard(mh_b)
    j = 1 / 3
    se_ours, se_theirs = math.sqrt(j * (1 - j) / M), math.sqrt(j * (1 - j) / perms)
    assert abs(ours - j) <= 5 * se_ours
    assert abs(ours - theirs) <= 5 * math.hypot(se_ours, se_theirs)
    # the intersection estimate J·|A ∪ B| of both agrees with the truth (1500)
    union = cardinality(
        partition_sketch(np.union1d(a, b), np.zeros(4500, dtype=int), 1, KEY, DpfmParams(M=M),
                         np.random.default_rng(0)), 1.0)[0]
    assert abs(ours * union - 1500) <= 5 * math.hypot(se_ours * 4500, C_GAMMA1 * 1500 / math.sqrt(M))


# ---------------------------------------------------------------------------------------------
# §19 item 12 and boundary errors


@pytest.mark.parametrize("gamma, dtype", [(1.0, np.uint8), (0.1, np.uint16)])
def test_only_integer_registers_leave_the_party(gamma: float, dtype: type) -> None:
    params = DpfmParams(M=64, gamma=gamma, epsilon=1.0, delta=1e-5)
    out = partition_sketch(np.arange(100), np.arange(100) % 5, 5, KEY, params, np.random.default_rng(0))
    assert type(out) is np.ndarray and out.dtype == dtype and out.shape == (64, 5)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"params": {"M": 4}}, TypeError, "params must be a DpfmParams, got dict"),
        ({"rng": 3}, TypeError, r"rng must be a numpy.random.Generator \(e.g. fedpriv.rng.stream\(...\)\), got int"),
        ({"key": "secret"}, TypeError, "key must be a HashKey, got str"),
        ({"labels": np.array([0, 5])}, ValueError, r"labels must lie in \[0, 1\] \(k=2\)"),
        ({"backend": "blake2b"}, ValueError, "backend must be one of 'prf', 'datasketch'"),
    ],
)
def test_partition_sketch_errors(kwargs: dict, exc: type, match: str) -> None:
    kwargs = {"ids": np.array([1, 2]), "labels": np.array([0, 1]), "k": 2, "key": KEY,
              "params": DpfmParams(M=4), "rng": np.random.default_rng(0), **kwargs}
    with pytest.raises(exc, match=match):
        partition_sketch(**kwargs)
