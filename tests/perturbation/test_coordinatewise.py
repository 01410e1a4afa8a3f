"""Tests of fedpriv.perturbation.Coordinatewise (docs/federated_ldp_sgd.md §3, §10 items 2-3).

Oracles are written from the spec, not read off the code: the per-coordinate variances of §5
(Laplace 8/ε_c², Piecewise t²/a + (a+4)/(3a²) with a = e^{ε_c/2} − 1, Duchi B² − t², Gaussian
σ² with σ = Δ·sqrt(2 ln(1.25/δ))/ε) and the §3 budget table. Monte Carlo checks use fixed keyed
streams and allow 5 standard errors, where the standard error of a sample variance comes from the
fourth moment: SE(v̂)/v = sqrt((μ₄/v² − 1)/N) (Laplace kurtosis 6 → sqrt(5/N), Gaussian 3 → sqrt(2/N)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedpriv.perturbation import Coordinatewise, get_perturbation
from fedpriv.rng import CounterRows, stream

EPS = 2.0**-52
F64 = torch.float64
Z = 5.0  # standard errors allowed in every Monte Carlo check


def _key(seed: int, purpose: str = "test-coordinatewise") -> np.random.Generator:
    return stream(seed, 0, 0, purpose)


def _inside_cube(d: int, clip_norm: float, seed: int, fill: float = 0.9) -> torch.Tensor:
    """An update whose normalized coordinates t = g·√d/C lie in [-fill, fill]: no clip, no clamp."""
    u = np.random.default_rng(seed).uniform(-1.0, 1.0, d)
    return torch.tensor(u * fill * clip_norm / math.sqrt(d), dtype=F64)


def _pm_var(t: float, eps_c: float) -> float:
    """Piecewise variance t²/a + (a+4)/(3a²), a = e^{ε_c/2} − 1, written in 1/a (0 once e^{ε_c/2} overflows)."""
    inv_a = 1.0 / math.expm1(eps_c / 2.0) if eps_c < 1400.0 else 0.0
    return t * t * inv_a + (inv_a + 4.0 * inv_a * inv_a) / 3.0


def _classical_sigma(sens: float, eps: float, delta: float) -> float:
    return sens * math.sqrt(2.0 * math.log(1.25 / delta)) / eps


# ---------------------------------------------------------------------------------- §10.2 zero-noise limit

# name, params, per-coordinate variance (normalized units) at budget eps_c for input t, in split mode
ZERO_NOISE = [
    ("laplace", {}, lambda t, e, d: 8.0 / (e / d) ** 2),
    ("piecewise", {}, lambda t, e, d: _pm_var(t, e / d)),
    ("gaussian", {"delta": 1e-5}, lambda t, e, d: _classical_sigma(2.0 * math.sqrt(d), e, 1e-5) ** 2),
]


@pytest.mark.parametrize("name, params, var", ZERO_NOISE, ids=[z[0] for z in ZERO_NOISE])
@pytest.mark.parametrize("d", [3, 40])
def test_zero_noise_limit_returns_the_update(name, params, var, d: int) -> None:
    """§10.2: as ε → ∞ the output is the clipped update; the tolerance is set by the variance.

    E‖g* − g̃‖² = (C²/d) Σ_z v(t_z); by Chebyshev, ‖g* − g̃‖ ≤ 10·sqrt(E‖·‖²) fails with
    probability ≤ 1%, for any noise law. Rounding of t = g·√d/C and of the rescale adds a few ulps
    per coordinate (≤ 8·EPS·‖g‖ in norm). The bound must itself be tiny for the test to mean anything.
    """
    C, eps = 0.7, 1e14
    p = Coordinatewise(name, eps, clip_norm=C, **params)
    for seed in range(5):
        g = _inside_cube(d, C, seed)
        t = (g * math.sqrt(d) / C).numpy()
        expected_sq = (C * C / d) * sum(var(float(tz), eps, d) for tz in t)
        bound = 10.0 * math.sqrt(expected_sq) + 8.0 * EPS * float(torch.linalg.vector_norm(g))
        assert bound < 1e-9 * float(torch.linalg.vector_norm(g))  # the check is meaningful
        out = p.perturb(g, _key(seed))
        assert float(torch.linalg.vector_norm(out.vector - g)) <= bound
        assert out.metrics["clamped_fraction"] == 0.0
        assert out.metrics["clipped"] == 0.0


def test_zero_noise_limit_after_clipping_and_clamping() -> None:
    """The clamp of §3 step 1 is applied and logged: a constructed vector with known clamps.

    d = 4, C = 2, so C/√d = 1 and t = g. g = (1.5, −0.5, 0.3, −1.1) has ‖g‖ ≈ 1.95 < C (no clip)
    and two coordinates outside [-1, 1]: clamped fraction 1/2 and, without noise, output
    (1, −0.5, 0.3, −1).
    """
    p = Coordinatewise("laplace", 1e12, clip_norm=2.0)
    g = torch.tensor([1.5, -0.5, 0.3, -1.1], dtype=F64)
    out = p.perturb(g, _key(1))
    assert out.metrics["clamped_fraction"] == 0.5
    assert out.metrics["clipped"] == 0.0
    # noise std in gradient units: sqrt(8)·d/ε = 3e-11; 10 std is far below the 1e-9 allowed
    torch.testing.assert_close(out.vector, torch.tensor([1.0, -0.5, 0.3, -1.0], dtype=F64), rtol=0, atol=1e-9)


def test_clipping_then_clamping() -> None:
    """An update longer than C is clipped first (reported), then clamped on the normalized scale."""
    C, d = 1.0, 5
    g = torch.tensor([30.0, 4.0, 0.0, -4.0, 0.0], dtype=F64)  # ‖g‖ = sqrt(932) > C
    p = Coordinatewise("piecewise", 1e12, clip_norm=C)
    out = p.perturb(g, _key(2))
    assert out.metrics["clipped"] == 1.0
    assert out.metrics["norm_before_clip"] == pytest.approx(math.sqrt(932.0), rel=4 * EPS)
    t = g.numpy() / math.sqrt(932.0) * math.sqrt(d) / C  # (4.91, 0.655, 0, -0.655, 0)
    assert out.metrics["clamped_fraction"] == pytest.approx(np.mean(np.abs(t) > 1))
    expected = np.clip(t, -1, 1) * C / math.sqrt(d)
    torch.testing.assert_close(out.vector, torch.tensor(expected, dtype=F64), rtol=0, atol=1e-12)


def test_zero_update_is_valid() -> None:
    """A zero update is valid input (clipping reports it, nothing is clamped)."""
    out = Coordinatewise("laplace", 1.0, clip_norm=1.0).perturb(torch.zeros(6), _key(3))
    assert out.metrics["norm_before_clip"] == 0.0 and out.metrics["clipped"] == 0.0
    assert out.metrics["clamped_fraction"] == 0.0
    assert bool(torch.isfinite(out.vector).all())


# ---------------------------------------------------------------------------------- noise variance (§3, §5)

def _duchi_var(t: float, eps_c: float) -> float:
    B = (math.exp(eps_c) + 1.0) / (math.exp(eps_c) - 1.0)
    return B * B - t * t


D_MC, CALLS_MC, T_ABS = 400, 350, 0.5  # 1.4e5 coordinate draws per configuration; |t_z| = 0.5


def _var_case(name: str, mode: str):
    """(constructor kwargs, expected per-coordinate variance in normalized units, kurtosis or None)."""
    eps_c = 1.0  # per-coordinate budget in both modes
    eps = eps_c * D_MC if mode == "split" else eps_c
    if name == "laplace":
        return {"epsilon": eps}, 8.0 / eps_c**2, 6.0
    if name == "piecewise":
        return {"epsilon": eps}, _pm_var(T_ABS, eps_c), None
    if name == "duchi":
        return {"epsilon": eps}, _duchi_var(T_ABS, eps_c), None
    # Gaussian: one vector release of L2 sensitivity 2√d (split) or (ε, δ) per coordinate, sensitivity 2
    sens = 2.0 * math.sqrt(D_MC) if mode == "split" else 2.0
    return {"epsilon": 0.5, "delta": 1e-5}, _classical_sigma(sens, 0.5, 1e-5) ** 2, 3.0


@pytest.mark.parametrize("mode", ["split", "per_coordinate"])
@pytest.mark.parametrize("name", ["laplace", "piecewise", "duchi", "gaussian"])
def test_per_coordinate_noise_variance(name: str, mode: str) -> None:
    """Var(g*_z) = (C/√d)²·v(t_z) at ε/d (split) or ε (per_coordinate), by Monte Carlo.

    All |t_z| = 0.5, so every coordinate has the same variance and 1.4e5 draws pool across d and
    calls, enough for 5 SE ≤ 3% (docs/federated_ldp_sgd.md §10, item 3) even at Laplace's kurtosis 6. The
    mean of each coordinate is known (t_z: all four are unbiased), so v̂ = mean((g* − g̃)²) and
    SE(v̂) = sqrt((μ₄ − v²)/N), μ₄ from the kurtosis where it is a constant (Laplace 6,
    Gaussian 3) and from the sample otherwise (Piecewise, Duchi).
    """
    C = 0.3
    kwargs, v_norm, kurt = _var_case(name, mode)
    p = Coordinatewise(mechanism=name, clip_norm=C, budget_mode=mode, **kwargs)
    signs = np.where(np.arange(D_MC) % 2 == 0, 1.0, -1.0)
    g = torch.tensor(signs * T_ABS * C / math.sqrt(D_MC), dtype=F64)
    rng = _key(10)
    noise = np.concatenate([(p.perturb(g, rng).vector - g).numpy() for _ in range(CALLS_MC)])
    expected = v_norm * C * C / D_MC
    sq = noise**2
    v_hat = float(sq.mean())
    n = sq.size
    mu4 = kurt * expected**2 if kurt is not None else float((sq**2).mean())
    se = math.sqrt((mu4 - expected**2) / n)
    assert Z * se <= 0.03 * expected
    assert abs(v_hat - expected) <= Z * se, (v_hat, expected, se)
    # the logged noise std is the same quantity, exactly
    out = p.perturb(g, rng)
    assert out.metrics["noise_std"] == pytest.approx(math.sqrt(expected), rel=1e-12)


def test_gaussian_split_std_in_gradient_units() -> None:
    """§3 table: per-coordinate std 2√d·sqrt(2 ln(1.25/δ))/ε normalized = 2C·sqrt(2 ln(1.25/δ))/ε."""
    C, eps, delta = 0.1, 0.8, 1e-5
    expected = 2.0 * C * math.sqrt(2.0 * math.log(1.25 / delta)) / eps
    p = Coordinatewise("gaussian", eps, clip_norm=C, delta=delta)
    for d in (1, 10, 785):
        sigma_norm = float(np.asarray(p.mechanism_for(d).sigma))
        assert sigma_norm * C / math.sqrt(d) == pytest.approx(expected, rel=1e-13)
        g = _inside_cube(d, C, seed=d)
        assert p.perturb(g, _key(d)).metrics["noise_std"] == pytest.approx(expected, rel=1e-13)


def test_mechanism_budget_per_mode() -> None:
    """mechanism_for(d) carries ε/d (split) or ε (per_coordinate) for the ε-LDP mechanisms."""
    for name in ("laplace", "piecewise", "duchi", "square_wave"):
        split = Coordinatewise(name, 2.0, clip_norm=1.0)
        per = Coordinatewise(name, 2.0, clip_norm=1.0, budget_mode="per_coordinate")
        assert float(split.mechanism_for(8).epsilon) == pytest.approx(0.25, rel=EPS)
        assert float(per.mechanism_for(8).epsilon) == 2.0


# ---------------------------------------------------------------------------------- guarantees (§3)

@pytest.mark.parametrize("name", ["laplace", "piecewise", "duchi", "square_wave"])
def test_guarantee_pure_mechanisms(name: str) -> None:
    d, eps = 12, 0.9
    split = Coordinatewise(name, eps, clip_norm=1.0).guarantee_for(d)
    assert (split.epsilon, split.delta, split.holds) == (eps, 0.0, True)
    assert split.scope == "one update vector" and split.relation == "any-two-inputs"
    per = Coordinatewise(name, eps, clip_norm=1.0, budget_mode="per_coordinate").guarantee_for(d)
    assert per.epsilon == pytest.approx(d * eps, rel=EPS) and per.delta == 0.0 and per.holds
    assert f"d={d}" in per.note
    if name == "square_wave":
        assert "biased" in split.note


def test_guarantee_gaussian() -> None:
    d, eps, delta = 20, 0.5, 1e-4
    split = Coordinatewise("gaussian", eps, clip_norm=1.0, delta=delta).guarantee_for(d)
    assert (split.epsilon, split.delta, split.holds) == (eps, delta, True)
    per = Coordinatewise("gaussian", eps, clip_norm=1.0, delta=delta, budget_mode="per_coordinate")
    g = per.guarantee_for(d)
    assert g.epsilon == pytest.approx(d * eps, rel=EPS)
    assert g.delta == pytest.approx(d * delta, rel=EPS) and g.holds
    # basic composition past δ = 1 is no guarantee at all
    big = Coordinatewise("gaussian", eps, clip_norm=1.0, delta=0.1, budget_mode="per_coordinate").guarantee_for(d)
    assert big.delta == 1.0 and not big.holds


def test_call_guarantee_matches_guarantee_for() -> None:
    p = Coordinatewise("laplace", 1.0, clip_norm=1.0, budget_mode="per_coordinate")
    out = p.perturb(torch.ones(2, 3), _key(4))
    assert out.guarantee == p.guarantee_for(6)


# ---------------------------------------------------------------------------------- shape, dtype, config

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("name", ["laplace", "piecewise", "duchi", "square_wave", "gaussian"])
def test_output_keeps_shape_and_dtype(name: str, dtype: torch.dtype) -> None:
    kwargs = {"delta": 1e-5} if name == "gaussian" else {}
    p = Coordinatewise(name, 1.0, clip_norm=1.0, **kwargs)
    g = torch.linspace(-1, 1, 24, dtype=dtype).reshape(2, 3, 4)
    out = p.perturb(g, _key(5))
    assert out.vector.shape == g.shape and out.vector.dtype == dtype
    assert out.vector.device == g.device
    assert out.metrics["output_norm"] > 0


def test_input_is_not_modified() -> None:
    g = torch.linspace(-3, 3, 10, dtype=F64)
    before = g.clone()
    Coordinatewise("laplace", 1.0, clip_norm=1.0).perturb(g, _key(6))
    assert torch.equal(g, before)


def test_config_round_trips_through_the_registry() -> None:
    p = Coordinatewise("gaussian", 0.5, clip_norm=0.1, delta=1e-5, budget_mode="per_coordinate",
                       mechanism_params={"calibration": "analytic"})
    cfg = p.config()
    assert cfg == {"perturbation": "coordinatewise", "mechanism": "gaussian", "epsilon": 0.5, "delta": 1e-5,
                   "clip_norm": 0.1, "budget_mode": "per_coordinate",
                   "mechanism_params": {"calibration": "analytic"}, "sample_dims": None}
    rebuilt = get_perturbation(cfg.pop("perturbation"), **cfg)
    g = torch.linspace(-0.01, 0.02, 7, dtype=F64)
    assert torch.equal(rebuilt.perturb(g, _key(7)).vector, p.perturb(g, _key(7)).vector)


# ---------------------------------------------------------------------------------- m of d coordinates

@pytest.mark.parametrize("mechanism", ["laplace", "piecewise", "square_wave"])
def test_sampled_upload_is_unbiased_for_mu_with_the_stated_variance(mechanism: str) -> None:
    """docs/hdr4me.md §9: (d/m)·y on m sampled coordinates; mean μ(t), variance ((v+μ²)·d/m − μ²) per coordinate."""
    d, m, reps, clip = 8, 2, 10_000, 1.0
    p = Coordinatewise(mechanism, 4.0, clip_norm=clip, sample_dims=m)
    g = torch.linspace(-0.3, 0.3, d, dtype=F64)
    scale = math.sqrt(d) / clip
    t = (g * scale).numpy()
    outs = np.stack([p.perturb(g, _key(k)).vector.numpy() * scale for k in range(reps)])
    assert np.all((outs != 0).sum(axis=1) <= m)  # at most m coordinates carry a report
    mech = p.mechanism_for(d)
    mu = mech.mean(t)
    var = (mech.var(t) + mu**2) * (d / m) - mu**2
    se = np.sqrt(var / reps)
    assert np.all(np.abs(outs.mean(0) - mu) < 5 * se)
    centred = outs - outs.mean(0)
    se_var = np.sqrt(np.mean(centred**4, axis=0) - np.mean(centred**2, axis=0) ** 2) / np.sqrt(reps)
    assert np.all(np.abs(outs.var(0) - var) < 5 * se_var)


def test_sampled_budget_is_split_over_m_and_guarantee_says_so() -> None:
    p = Coordinatewise("laplace", 2.0, clip_norm=1.0, sample_dims=4)
    assert p.mechanism_for(100).epsilon == pytest.approx(0.5)
    assert p.guarantee_for(100).epsilon == 2.0 and "4 of 100" in p.guarantee_for(100).note
    per = Coordinatewise("laplace", 2.0, clip_norm=1.0, sample_dims=4, budget_mode="per_coordinate")
    assert per.guarantee_for(100).epsilon == pytest.approx(8.0)
    with pytest.raises(ValueError, match="sample_dims must be <= d"):
        p.perturb(torch.zeros(3, dtype=F64), _key(0))
    with pytest.raises(ValueError, match="sample_dims must be >= 1"):
        Coordinatewise("laplace", 2.0, clip_norm=1.0, sample_dims=-1)


# ---------------------------------------------------------------------------------- bad inputs

BAD = [
    ({"mechanism": "square_wave", "mechanism_params": {"domain": "unit"}}, ValueError, r"input domain \[-1, 1\]"),
    ({"budget_mode": "per_value"}, ValueError, r"budget_mode must be one of 'split', 'per_coordinate'"),
    ({"delta": 1e-5}, ValueError, r"delta applies to the gaussian mechanism only"),
    ({"mechanism": "gaussian"}, TypeError, r"delta is required for the gaussian mechanism"),
    ({"mechanism": "gaussian", "delta": 1e-5, "mechanism_params": {"delta": 0.1}}, ValueError,
     r"mechanism_params must not set 'delta'"),
    ({"mechanism": "gaussian", "delta": 1e-5, "mechanism_params": {"sensitivity": 1.0}}, ValueError,
     r"mechanism_params must not set 'sensitivity'"),
    ({"mechanism_params": {"scale": 2.0}}, TypeError, r"mechanism 'laplace' got unknown parameter\(s\) scale"),
    ({"mechanism": "exponential"}, ValueError, r"name must be one of 'laplace'"),
    ({"epsilon": [1.0, 2.0]}, TypeError, r"epsilon must be a scalar"),
    ({"epsilon": 0.0}, ValueError, r"epsilon must be > 0 and finite, got 0\.0"),
    ({"epsilon": math.inf}, ValueError, r"epsilon must be > 0 and finite"),
    ({"clip_norm": 0.0}, ValueError, r"clip_norm must be > 0 and finite"),
    ({"clip_norm": math.nan}, ValueError, r"clip_norm must be > 0 and finite"),
]


@pytest.mark.parametrize("kwargs, exc, match", BAD)
def test_bad_constructor_arguments(kwargs: dict, exc: type, match: str) -> None:
    base = {"mechanism": "laplace", "epsilon": 1.0, "clip_norm": 1.0}
    with pytest.raises(exc, match=match):
        Coordinatewise(**{**base, **kwargs})


# ---------------------------------------------------------------------------------- native float32 path

def _native(p: Coordinatewise, rows: torch.Tensor) -> torch.Tensor:
    """The native release of ``rows`` with client i's counter stream (clients 0..N−1, round 1)."""
    return p.perturb_rows(rows, CounterRows.keyed(0, 1, list(range(rows.shape[0])), "noise")).vectors


def test_native_direct_norms_equal_the_scaled_norm_path() -> None:
    # The direct-norm path forms t = v·(min(1, C/‖v‖)·√d/C) in one multiply; clip_rows' path forms
    # (v·(C/‖v/m‖)/m)·√d/C. Each is within a few float32 roundings of the exact t (|t| ≤ 1 after the
    # clamp, so |Δt| ≤ 8·eps32), and the noise is the same bits: |Δout| ≤ 8·eps32·C/√d + one rounding
    # of out's own size (eps32·|out|).
    p = Coordinatewise("gaussian", 1.0, clip_norm=1.0, delta=1e-5)
    gen = torch.Generator().manual_seed(3)
    rows = torch.randn(6, 50, generator=gen) * torch.tensor([0.01, 0.1, 1.0, 3.0, 10.0, 100.0])[:, None]
    d, eps = 50, torch.finfo(torch.float32).eps
    direct = _native(p, rows)
    streams = CounterRows.keyed(0, 1, list(range(6)), "noise")
    scaled = torch.empty_like(rows)
    p._native_rows(rows, streams, scaled, None)  # clip_rows' scaled norms
    assert torch.all((direct - scaled).abs() <= 8 * eps / math.sqrt(d) + eps * direct.abs())


def test_native_path_names_a_non_finite_row() -> None:
    p = Coordinatewise("laplace", 1.0, clip_norm=1.0)
    rows = torch.ones(4, 10)
    rows[2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"finite, got 1 NaN/inf value\(s\) in row\(s\) 2"):
        _native(p, rows)


def test_native_path_clips_a_row_whose_squared_norm_overflows() -> None:
    # ‖v‖² of 1e20·u overflows float32 (1e40 > 3.4e38): the norms are taken of v/max|v| instead, and the
    # row is clipped to its direction, as the same direction at a representable scale is.
    p = Coordinatewise("gaussian", 1.0, clip_norm=1.0, delta=1e-5)
    u = torch.linspace(-1.0, 1.0, 40).reshape(1, 40) * 2.0  # ‖u‖ > C: clipped in both
    huge, plain = _native(p, u * 1e20), _native(p, u)
    eps = torch.finfo(torch.float32).eps
    assert torch.isfinite(huge).all()
    assert torch.all((huge - plain).abs() <= 8 * eps / math.sqrt(40) + eps * plain.abs())
