"""Vectorized Shamir sharing over GF(2^31 − 1): reconstruction, secrecy of t − 1 shares, errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedpriv.secagg import crypto
from fedpriv.secagg.shamir import (
    PRIME,
    combine,
    combine_rows,
    lagrange_at_zero,
    lagrange_at_zero_rows,
    reconstruct,
    share_from_bytes,
    share_to_bytes,
    shares_from_bytes,
    split,
)


@pytest.fixture
def seeded_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the OS CSPRNG by a seeded source so the statistical test is reproducible."""
    gen = np.random.default_rng(20240611)
    monkeypatch.setattr(crypto, "random_bytes", lambda count: gen.bytes(count))


def test_any_threshold_subset_reconstructs() -> None:
    secret = bytes(range(32))
    xs = np.arange(1, 11)
    shares = split(secret, threshold=4, xs=xs)
    assert shares.shape == (10, 16) and shares.dtype == np.int64 and shares.max() < PRIME
    pick = np.random.default_rng(0)
    for _ in range(20):
        idx = pick.choice(10, size=pick.integers(4, 11), replace=False)
        assert reconstruct(xs[idx], shares[idx], threshold=4) == secret
    assert reconstruct(xs[:1], split(secret, threshold=1, xs=xs)[:1], threshold=1) == secret


def test_lagrange_matches_exact_integer_formula() -> None:
    xs = np.array([3, 17, 2**30 + 5, 999_999, 42])
    expected = []
    for i, xi in enumerate(xs.tolist()):
        num = den = 1
        for j, xj in enumerate(xs.tolist()):
            if j != i:
                num, den = num * xj % PRIME, den * (xj - xi) % PRIME
        expected.append(num * pow(den, -1, PRIME) % PRIME)
    np.testing.assert_array_equal(lagrange_at_zero(xs), expected)


def test_shares_are_polynomial_values() -> None:
    # independent oracle: t shares determine the degree-(t−1) polynomial; a (t+1)-th share lies on it
    secret = b"\x12\x34" * 16
    xs = np.arange(1, 8)
    shares = split(secret, threshold=3, xs=xs)
    for k in range(3, 7):
        # value at x_k from the first three points by exact Lagrange interpolation in Python ints
        xk = int(xs[k])
        value = [0] * 16
        for a in range(3):
            basis = 1
            for b in range(3):
                if b != a:
                    basis = basis * (xk - int(xs[b])) * pow(int(xs[a]) - int(xs[b]), -1, PRIME) % PRIME
            for limb in range(16):
                value[limb] = (value[limb] + basis * int(shares[a, limb])) % PRIME
        assert value == shares[k].tolist()


def test_combine_rebuilds_many_secrets_at_once() -> None:
    xs = np.array([5, 9, 11, 2])
    secrets = [bytes([i]) * 32 for i in range(6)]
    stacked = np.stack([split(s, threshold=3, xs=xs) for s in secrets], axis=1)  # (points, secrets, limbs)
    limbs = combine(lagrange_at_zero(xs[1:]), stacked[1:])
    assert [limbs[k].astype(">u2").tobytes() for k in range(6)] == secrets


def test_row_wise_reconstruction_with_a_point_set_per_secret() -> None:
    # each secret shared at its own points (a sparse graph's neighbourhoods) and rebuilt from its own subset
    pick = np.random.default_rng(3)
    secrets = [bytes(pick.integers(0, 256, 32, dtype=np.uint8)) for _ in range(7)]
    points = [pick.choice(np.arange(1, 200), size=6, replace=False) for _ in secrets]
    chosen = [pick.choice(6, size=3, replace=False) for _ in secrets]
    shares = np.stack([split(s, threshold=3, xs=xs)[c] for s, xs, c in zip(secrets, points, chosen, strict=True)])
    xs = np.stack([xs[c] for xs, c in zip(points, chosen, strict=True)])
    lam = lagrange_at_zero_rows(xs)
    for row in range(len(secrets)):  # row-wise equals the 1-D function (checked against exact integers above)
        np.testing.assert_array_equal(lam[row], lagrange_at_zero(xs[row]))
    limbs = combine_rows(lam, shares)
    assert [limbs[k].astype(">u2").tobytes() for k in range(len(secrets))] == secrets
    blob = b"".join(share_to_bytes(r) for r in shares[:, 0, :])
    np.testing.assert_array_equal(shares_from_bytes(blob, count=len(secrets), limbs=16), shares[:, 0, :])
    with pytest.raises(ValueError, match="xs must be distinct within each row"):
        lagrange_at_zero_rows(np.array([[1, 2], [3, 3]]))


def test_split_draws_fresh_coefficients() -> None:
    xs = np.arange(1, 6)
    assert not np.array_equal(split(bytes(32), threshold=3, xs=xs), split(bytes(32), threshold=3, xs=xs))


def test_t_minus_one_shares_do_not_depend_on_the_secret(seeded_csprng: None) -> None:
    # t = 3: the shares at t − 1 = 2 points are uniform on GF(p)^2 whatever the secret. Bin each share
    # into 8 equal bins (64 joint cells) for two opposite secrets; a chi-square homogeneity test and
    # goodness-of-fit tests to uniform must not reject at level 1e-3 (a leaking scheme, e.g. zero
    # higher coefficients, is rejected with p ≈ 0).
    xs = np.array([1, 2, 3, 4, 5])
    counts = []
    for fill in (0x00, 0xFF):
        secret = bytes([fill]) * 4000  # 2000 independently shared limbs per split
        pairs = np.concatenate([split(secret, threshold=3, xs=xs)[[1, 4]].T for _ in range(8)])
        cells = (pairs * 8 // PRIME) @ np.array([8, 1])
        count = np.bincount(cells, minlength=64)
        assert stats.chisquare(count).pvalue > 1e-3
        counts.append(count)
    assert stats.chi2_contingency(np.array(counts)).pvalue > 1e-3


def test_corrupted_share_gives_a_wrong_secret_or_an_error() -> None:
    secret = bytes(range(32))
    xs = np.arange(1, 6)
    shares = split(secret, threshold=3, xs=xs)
    shares[1, 4] = (shares[1, 4] + 1) % PRIME
    try:
        rebuilt = reconstruct(xs, shares, threshold=3)
    except ValueError as exc:
        assert "inconsistent" in str(exc)
    else:
        assert rebuilt != secret


def test_share_bytes_round_trip() -> None:
    share = split(bytes(range(32)), threshold=2, xs=np.array([1, 2]))[0]
    data = share_to_bytes(share)
    assert len(data) == 64
    np.testing.assert_array_equal(share_from_bytes(data, limbs=16), share)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"secret": b"", "threshold": 1, "xs": np.array([1])}, "secret must be a non-empty bytes object of even"),
        ({"secret": b"abc", "threshold": 1, "xs": np.array([1])}, "got 3 bytes"),
        ({"secret": b"ab", "threshold": 0, "xs": np.array([1])}, "threshold must be >= 1, got 0"),
        ({"secret": b"ab", "threshold": 3, "xs": np.array([1, 2])}, "threshold must be <= 2, got 3"),
        ({"secret": b"ab", "threshold": 1, "xs": np.array([0, 2])}, r"xs must lie in \[1, 2147483647\)"),
        ({"secret": b"ab", "threshold": 1, "xs": np.array([1, PRIME])}, r"xs must lie in \[1, 2147483647\)"),
        ({"secret": b"ab", "threshold": 1, "xs": np.array([2, 2])}, "xs must be distinct, got 1 repeated"),
        ({"secret": b"ab", "threshold": 1, "xs": np.array([1.0, 2.0])}, "xs must be a non-empty 1-D integer"),
    ],
)
def test_split_errors(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        split(**kwargs)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: reconstruct(np.array([1, 2]), np.zeros((2, 4), np.int64), threshold=3),
         "reconstruct needs at least threshold = 3 shares, got 2"),
        (lambda: reconstruct(np.array([1, 2]), np.zeros((3, 4), np.int64), threshold=2),
         r"shares must have shape \(len\(xs\), limbs\) = \(2, limbs\)"),
        (lambda: combine(np.array([1, 2]), np.full((2, 3), PRIME)), "shares must lie in"),
        (lambda: share_from_bytes(b"\x00" * 7, limbs=2), "share must be 8 bytes"),
        (lambda: share_from_bytes(b"\xff" * 8, limbs=2), "share must hold field elements below p"),
        (lambda: share_to_bytes(np.array([PRIME])), "share must be a 1-D integer array"),
    ],
)
def test_other_errors(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()
