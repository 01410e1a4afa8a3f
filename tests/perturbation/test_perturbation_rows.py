"""Tests of batched perturbation: ``RowStreams`` and ``Perturbation.perturb_rows``.

The contract (docs/design.md §4): row i of a batched draw or transform is bit for bit what client i's
own keyed Generator gives when it runs alone, so the fast engine and a Flower client agree.

Oracles are the per-client paths themselves run one row at a time: ``generators[i].<method>``
for ``RowStreams``, ``perturb(updates[i], stream(..., ids[i], ...))`` for ``perturb_rows``.

Tolerances. Coordinatewise, DP-SGD and clipping only are compared with ``torch.equal``: every row
goes through the same float64 arithmetic (elementwise IEEE operations and row reductions that
torch and numpy run per row, whatever the batch size). LDPVec and GeoDP are compared at
``rtol=1e-12``: their hyper-spherical transforms call atan2/sin/cos, which torch evaluates with
SIMD or scalar code depending on an element's position in the flattened batch and on the thread
split, so an angle may differ in its last bit between a batch and a single row (seen with 16
threads); the inverse transform multiplies d such terms, giving relative differences of about
d·2⁻⁵² ≈ 1e-14 at the sizes used here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedpriv.perturbation.base as perturbation_base
from fedpriv.mechanisms import get_mechanism
from fedpriv.mechanisms.base import Guarantee
from fedpriv.mechanisms.protocol import sample_dimensions
from fedpriv.perturbation import (
    Perturbation,
    PerturbedRows,
    clip_l2,
    clip_rows,
    direct_norms,
    get_perturbation,
    leading_energy_fraction,
    leading_energy_shares,
    public_permutation,
)
from fedpriv.perturbation.base import cosine, cosine_rows
from fedpriv.rng import RowStreams, stream, torch_stream

F64 = torch.float64
SEED, ROUND = 0, 1
IDS = [3, 11, 12, 40, 41, 977, 5]


def _streams(ids=IDS, purpose: str = "noise") -> list[np.random.Generator]:
    return [stream(SEED, ROUND, c, purpose) for c in ids]


def _generators(n: int, purpose: str = "rows") -> list[np.random.Generator]:
    return [stream(5, 2, c, purpose) for c in range(n)]


def _batch(d: int, dtype: torch.dtype = F64) -> torch.Tensor:
    """Rows of very different norms: tiny, small, near C, above C, far above C, zero, one spike."""
    g = torch.randn(len(IDS), d, generator=torch.Generator().manual_seed(d), dtype=F64)
    g = g / torch.linalg.vector_norm(g, dim=-1, keepdim=True)
    norms = torch.tensor([1e-4, 0.05, 0.49, 0.8, 1e3, 0.0, 1.0], dtype=F64)
    u = g * norms[:, None]
    u[6] = 0.0
    u[6, d // 2] = 0.4  # one large coordinate: clamped by coordinatewise, below C in L2
    return u.to(dtype)


# ---------------------------------------------------------------------------------- RowStreams

SIZES = [lambda n: (n,), lambda n: n, lambda n: (n, 5), lambda n: [n, 3], lambda n: (n, 2, 3), lambda n: (n, 0)]
DRAWS = [
    ("random", {}),
    ("standard_normal", {}),
    ("laplace", {}),
    ("laplace", {"loc": 0.5, "scale": 2.0}),
]


@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("method, kwargs", DRAWS)
def test_row_streams_bits_equal_per_generator_draws(n: int, size, method: str, kwargs: dict) -> None:
    """Row i is generators[i].<method>(size[1:]), and every generator is left in the same state."""
    batched = RowStreams(_generators(n))
    solo = _generators(n)
    shape = size(n)
    got = getattr(batched, method)(size=shape, **kwargs)
    full = (shape,) if isinstance(shape, int) else tuple(shape)
    assert got.shape == full and got.dtype == np.float64
    for i, g in enumerate(solo):
        expected = getattr(g, method)(size=full[1:], **kwargs)
        assert np.array_equal(got[i], expected)
    for g_b, g_s in zip(batched.generators, solo):  # the streams continue in step
        assert g_b.random() == g_s.random()


def test_row_streams_scalar_rows_match_argumentless_draws() -> None:
    """size == (N,): each generator draws one scalar, the same bits as g.method()."""
    got = RowStreams(_generators(3)).standard_normal((3,))
    assert np.array_equal(got, [g.standard_normal() for g in _generators(3)])
    got = RowStreams(_generators(3)).random(3)
    assert np.array_equal(got, [g.random() for g in _generators(3)])
    got = RowStreams(_generators(3)).laplace(size=(3,))
    assert np.array_equal(got, [g.laplace() for g in _generators(3)])


def test_row_streams_laplace_broadcasts_parameters_per_row() -> None:
    loc = np.array([[0.0], [10.0], [-3.0]])
    scale = np.array([1.0, 2.0, 0.5, 4.0])
    got = RowStreams(_generators(3)).laplace(loc, scale, (3, 4))
    for i, g in enumerate(_generators(3)):
        assert np.array_equal(got[i], g.laplace(loc[i], scale, (4,)))


def test_row_streams_keyed_is_one_stream_per_client() -> None:
    rs = RowStreams.keyed(SEED, ROUND, IDS, "noise")
    assert len(rs) == len(IDS)
    got = rs.random((len(IDS), 6))
    for i, g in enumerate(_streams()):
        assert np.array_equal(got[i], g.random(6))


@pytest.mark.parametrize("size", [(3,), (5, 2), 2, (), None, (1, 4)])
def test_row_streams_size_must_lead_with_n(size) -> None:
    rs = RowStreams(_generators(4))
    with pytest.raises(ValueError, match=r"size must .*number of rows 4"):
        rs.random(size)
    with pytest.raises(ValueError, match=r"number of rows 4"):
        rs.standard_normal(size)


def test_row_streams_size_must_be_ints() -> None:
    with pytest.raises(TypeError, match=r"size must be an int or a tuple of ints"):
        RowStreams(_generators(2)).random((2.0, 3))


@pytest.mark.parametrize("name", ["integers", "normal", "uniform", "choice", "permutation", "bit_generator"])
def test_row_streams_has_no_other_generator_methods(name: str) -> None:
    with pytest.raises(AttributeError, match=rf"no attribute '{name}'.*only random, standard_normal and laplace"):
        getattr(RowStreams(_generators(2)), name)


@pytest.mark.parametrize("generators, exc, match", [
    ([], ValueError, r"generators must be non-empty"),
    ((), ValueError, r"generators must be non-empty"),
    (None, TypeError, r"generators must be a sequence"),
    (stream(0, 0, 0, "x"), TypeError, r"generators must be a sequence.*got Generator"),
    ([stream(0, 0, 0, "x"), np.random.RandomState(0)], TypeError, r"generators must hold .*RandomState at index 1"),
    ([0, 1], TypeError, r"generators must hold .*int at index 0"),
    ([torch.Generator()], TypeError, r"generators must hold"),
])
def test_row_streams_rejects_bad_generators(generators, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        RowStreams(generators)


@pytest.mark.parametrize("name, params", [
    ("laplace", {}), ("gaussian", {"delta": 1e-5}), ("piecewise", {}), ("duchi", {}), ("square_wave", {}),
])
def test_mechanism_perturb_accepts_row_streams(name: str, params: dict) -> None:
    """A mechanism on a batch (N, k) with RowStreams equals its per-row runs (ε broadcast per column too)."""
    mech = get_mechanism(name, np.array([0.5, 1.0, 2.0]), **params)
    x = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    got = mech.perturb(x, RowStreams(_generators(4)))
    for i, g in enumerate(_generators(4)):
        assert np.array_equal(got[i], mech.perturb(x[i], g))


def test_sample_dimensions_with_row_streams_matches_one_row_at_a_time() -> None:
    got = sample_dimensions(5, 30, 4, RowStreams(_generators(5)))
    for i, g in enumerate(_generators(5)):
        assert np.array_equal(got[i], sample_dimensions(1, 30, 4, g)[0])


# ---------------------------------------------------------------------------------- clipping


def test_clip_rows_matches_clip_l2_row_by_row() -> None:
    u = _batch(50)
    out, norms, clipped = clip_rows(u, 0.5)
    for i in range(u.shape[0]):
        ref, report = clip_l2(u[i], 0.5)
        assert torch.equal(out[i], ref)
        assert float(norms[i]) == report.norm_before and bool(clipped[i]) == report.clipped
    assert clipped.tolist() == [False, False, False, True, True, False, False]
    keep = ~clipped
    assert torch.equal(out[keep], u[keep])  # rows within C, the zero row included, unchanged bit for bit
    assert torch.allclose(torch.linalg.vector_norm(out[clipped], dim=-1), torch.tensor(0.5, dtype=F64),
                          rtol=4 * 2.0**-52, atol=0)


def _scalar_clip(v: torch.Tensor, bound: float) -> torch.Tensor:
    """Reference: the one-vector algorithm with Python floats, v/peak · (C/‖v/peak‖) when ‖v‖ > C."""
    peak = float(v.abs().max())
    if peak == 0.0:
        return v
    unit_norm = float(torch.linalg.vector_norm(v / peak))
    return (v / peak) * (bound / unit_norm) if peak * unit_norm > bound else v


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_clip_rows_matches_the_scalar_algorithm_bit_for_bit(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(2)
    u = (torch.randn(40, 300, generator=g, dtype=F64) * torch.logspace(-3, 3, 40, dtype=F64)[:, None]).to(dtype)
    out, _, clipped = clip_rows(u, 0.7)
    assert out.dtype == dtype and 0 < int(clipped.sum()) < 40
    for i in range(u.shape[0]):
        assert torch.equal(out[i], _scalar_clip(u[i], 0.7))


def test_clip_rows_returns_its_input_when_nothing_is_clipped() -> None:
    u = _batch(20)[:3]
    out, _, clipped = clip_rows(u, 1.0)
    assert out is u and not bool(clipped.any())


def test_clip_rows_handles_overflowing_norms_and_keeps_dtype() -> None:
    u = torch.full((2, 4), 1e200, dtype=F64)
    u[1] = 0.0
    out, norms, clipped = clip_rows(u, 1.0)
    assert torch.equal(out[0], torch.full((4,), 0.5, dtype=F64)) and torch.equal(out[1], u[1])
    assert math.isinf(float(norms[0])) or float(norms[0]) == pytest.approx(2e200)
    u32 = _batch(10, torch.float32)
    out32, _, _ = clip_rows(u32, 0.5)
    assert out32.dtype == torch.float32
    for i in range(u32.shape[0]):
        assert torch.equal(out32[i], clip_l2(u32[i], 0.5)[0])


@pytest.mark.parametrize("rows, match", [(torch.ones(3), r"rows must have shape \(N, d\)"),
                                         (torch.ones(2, 2, 2), r"rows must have shape \(N, d\)")])
def test_clip_rows_wants_a_matrix(rows, match) -> None:
    with pytest.raises(ValueError, match=match):
        clip_rows(rows, 1.0)


def test_cosine_rows_and_leading_energy_shares_per_row() -> None:
    a, b = _batch(30), _batch(30).flip(0)
    cos = cosine_rows(a, b)
    for i in range(a.shape[0]):
        assert float(cos[i]) == cosine(a[i], b[i])
    assert float(cos[5]) == 0.0  # the zero row
    shares = leading_energy_shares(a, 0.1)
    assert shares.shape == (a.shape[0],)
    for i in range(a.shape[0]):
        assert float(shares[i]) == leading_energy_fraction(a[i], 0.1)
    assert leading_energy_fraction(a, 0.1) == float(shares.mean())


# ---------------------------------------------------------------------------------- perturb_rows == stacked perturb

_COORD = [
    (mech, {**extra, "budget_mode": mode, **({"sample_dims": 7} if sampled else {})})
    for mech, extra in [("laplace", {}), ("gaussian", {"delta": 1e-5}), ("piecewise", {}), ("duchi", {}),
                        ("square_wave", {})]
    for mode in ("split", "per_coordinate")
    for sampled in (False, True)
]
EXACT = (
    [("none", {}), ("none", {"clip_norm": 0.5}), ("dpsgd", {"sigma": 1.0, "clip_norm": 0.5, "batch_size": 8})]
    + [("coordinatewise", {"mechanism": mech, "epsilon": 2.0, "clip_norm": 0.5, **extra}) for mech, extra in _COORD]
)
_LDP = [
    (mech, {**extra, "magnitude": mag})
    for mech, extra in [("laplace", {}), ("gaussian", {"delta": 1e-5}), ("piecewise", {})]
    for mag in ("perturb", "normalize", "keep")
] + [
    ("piecewise", {"beta": 0.5, "region": "centered", "angle_policy": "wrap"}),
    ("laplace", {"beta": 0.7, "region": "thesis", "partition": "uniform"}),
    ("gaussian", {"delta": 1e-5, "partition": "uniform", "angle_policy": "clamp", "magnitude": "perturb"}),
    ("square_wave", {"region": "thesis", "beta": 0.7}),
    ("duchi", {"partition": "uniform"}),
    ("laplace", {"region": "none", "beta": 0.5}),
]
GEOMETRIC = (
    [("ldpvec", {"mechanism": mech, "epsilon": 2.0, "clip_norm": 0.5, **extra}) for mech, extra in _LDP]
    + [("geodp", params) for params in (
        {"sigma": 0.5, "clip_norm": 0.5, "batch_size": 8},
        {"sigma": 0.5, "clip_norm": 0.5, "batch_size": 64, "region": "centered", "beta": 0.1,
         "angle_noise_scale": "unscaled", "magnitude_policy": "clamp0", "angle_policy": "wrap"},
        {"sigma": 0.05, "clip_norm": 0.5, "batch_size": 4, "region": "thesis", "beta": 0.6,
         "magnitude_policy": "abs", "angle_policy": "clamp"},
    )]
)


def _ids(cases) -> list[str]:
    return [f"{name}-" + "-".join(f"{k}={v}" for k, v in params.items()) for name, params in cases]


def _check_rows_equal_stacked(name: str, params: dict, u: torch.Tensor, exact: bool) -> PerturbedRows:
    p = get_perturbation(name, **params)
    rows = p.perturb_rows(u, _streams())
    singles = [p.perturb(u[i], stream(SEED, ROUND, c, "noise")) for i, c in enumerate(IDS)]
    stacked = torch.stack([s.vector for s in singles])
    assert isinstance(rows, PerturbedRows)
    assert rows.vectors.shape == u.shape and rows.vectors.dtype == u.dtype
    assert rows.guarantee == p.guarantee_for(u.shape[1])
    assert set(rows.metrics) == set(singles[0].metrics)
    for values in rows.metrics.values():
        assert isinstance(values, np.ndarray) and values.shape == (u.shape[0],) and values.dtype == np.float64
    if exact:
        assert torch.equal(rows.vectors, stacked)
        for key, values in rows.metrics.items():
            assert values.tolist() == [s.metrics[key] for s in singles], key
    else:
        scale = float(params["clip_norm"])
        torch.testing.assert_close(rows.vectors, stacked, rtol=1e-12, atol=1e-14 * scale)
        for key, values in rows.metrics.items():
            np.testing.assert_allclose(values, [s.metrics[key] for s in singles], rtol=1e-12, atol=1e-14, err_msg=key)
        for key in ("norm_before_clip", "clipped", "privacy_claim"):  # from clip_rows: exact
            if key in rows.metrics:
                assert rows.metrics[key].tolist() == [s.metrics[key] for s in singles], key
    for i, s in enumerate(singles):
        assert bool(rows.claim_holds[i]) == (s.metrics.get("privacy_claim", 1.0) != 0.0)
        assert s.guarantee.holds == (rows.guarantee.holds and bool(rows.claim_holds[i]))
    return rows


@pytest.mark.parametrize("d", [40, 257])
@pytest.mark.parametrize("name, params", EXACT, ids=_ids(EXACT))
def test_perturb_rows_equals_stacked_perturb_exactly(name: str, params: dict, d: int) -> None:
    rows = _check_rows_equal_stacked(name, params, _batch(d), exact=True)
    if "clip_norm" in params:
        assert rows.metrics["clipped"].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("d", [40, 257])
@pytest.mark.parametrize("name, params", GEOMETRIC, ids=_ids(GEOMETRIC))
def test_perturb_rows_equals_stacked_perturb_geometric(name: str, params: dict, d: int) -> None:
    rows = _check_rows_equal_stacked(name, params, _batch(d), exact=False)
    assert rows.metrics["clipped"].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    if params.get("magnitude") == "keep":  # rows shorter than C leak their norm; the zero row too
        assert rows.claim_holds.tolist() == [False, False, False, True, True, False, False]
    else:
        assert rows.claim_holds.all()


@pytest.mark.parametrize("name, params", [
    ("ldpvec", {"mechanism": "laplace", "epsilon": 2.0, "clip_norm": 0.5}),
    ("geodp", {"sigma": 0.5, "clip_norm": 0.5, "batch_size": 8, "region": "centered", "beta": 0.5}),
])
def test_perturb_rows_with_a_public_permutation(name: str, params: dict) -> None:
    d = 64
    perm = public_permutation(d, torch_stream(SEED, 0, 0, "perm"))
    _check_rows_equal_stacked(name, {**params, "coord_permutation": perm}, _batch(d), exact=False)


@pytest.mark.parametrize("name, params", [EXACT[1], EXACT[3], EXACT[2], GEOMETRIC[0], GEOMETRIC[-1]])
def test_perturb_rows_keeps_float32(name: str, params: dict) -> None:
    u = _batch(33, torch.float32)
    p = get_perturbation(name, **params)
    rows = p.perturb_rows(u, _streams())
    assert rows.vectors.dtype == torch.float32
    stacked = torch.stack([p.perturb(u[i], stream(SEED, ROUND, c, "noise")).vector for i, c in enumerate(IDS)])
    if name in ("ldpvec", "geodp"):
        torch.testing.assert_close(rows.vectors, stacked, rtol=1e-6, atol=1e-9)  # float64 results rounded to float32
    else:
        assert torch.equal(rows.vectors, stacked)


def test_region_clipped_fraction_is_per_row() -> None:
    """The fraction of angles the β-region moved is counted for each row, not over the batch."""
    u = _batch(40)
    p = get_perturbation("ldpvec", mechanism="laplace", epsilon=2.0, clip_norm=0.5, beta=0.3, region="centered")
    rows = p.perturb_rows(u, _streams())
    single = [p.perturb(u[i], s).metrics["region_clipped_fraction"] for i, s in enumerate(_streams())]
    assert rows.metrics["region_clipped_fraction"].tolist() == single
    assert len(set(single)) > 1  # rows differ, so a batch-wide fraction would be wrong for some


@pytest.mark.parametrize("name, params", [EXACT[4], EXACT[9], EXACT[-1], GEOMETRIC[4], GEOMETRIC[-2]])
def test_blocking_over_rows_changes_nothing(monkeypatch, name: str, params: dict) -> None:
    """perturb_rows runs blocks of rows; the block size must not change any bit or metric."""
    u = _batch(40)
    p = get_perturbation(name, **params)
    whole = p.perturb_rows(u, _streams())
    monkeypatch.setattr(perturbation_base, "ROW_BLOCK_VALUES", 2 * 40)  # blocks of 2 rows
    blocked = p.perturb_rows(u, _streams())
    assert torch.equal(whole.vectors, blocked.vectors)
    for key in whole.metrics:
        assert np.array_equal(whole.metrics[key], blocked.metrics[key]), key
    assert np.array_equal(whole.claim_holds, blocked.claim_holds)


def test_one_row_batch_is_perturb() -> None:
    p = get_perturbation("coordinatewise", mechanism="piecewise", epsilon=1.0, clip_norm=0.5)
    u = _batch(40)[3:4]
    rows = p.perturb_rows(u, RowStreams([stream(9, 9, 9, "noise")]))
    single = p.perturb(u[0], stream(9, 9, 9, "noise"))
    assert torch.equal(rows.vectors[0], single.vector)
    assert {k: float(v[0]) for k, v in rows.metrics.items()} == single.metrics


@pytest.mark.parametrize("name", ["piecewise", "laplace", "gaussian", "duchi", "square_wave"])
@pytest.mark.parametrize("sample_dims", [None, 7])
def test_coordinatewise_noise_std_is_the_rms_of_the_mechanism_variance(name: str, sample_dims) -> None:
    """noise_std (computed from row moments of t) equals sqrt(mean_j Var[upload_j]) from mechanism.var, per row."""
    extra = {"delta": 1e-5} if name == "gaussian" else {}
    C, d = 0.5, 40
    p = get_perturbation("coordinatewise", mechanism=name, epsilon=2.0, clip_norm=C, sample_dims=sample_dims, **extra)
    u = _batch(d)
    rows = p.perturb_rows(u, _streams())
    mech, m = p.mechanism_for(d), p.reported(d)
    scale = math.sqrt(d) / C
    for i in range(u.shape[0]):
        t = np.clip((clip_l2(u[i], C)[0] * scale).numpy(), -1.0, 1.0)
        mu = mech.mean(t)
        var = mech.var(t) if m == d else (mech.var(t) + mu**2) * (d / m) - mu**2
        assert rows.metrics["noise_std"][i] == pytest.approx(math.sqrt(np.mean(var)) / scale, rel=1e-13)


# ---------------------------------------------------------------------------------- subclasses


class _OnlyPerturb(Perturbation):
    """The extension path: a one-update ``_perturb`` only (batches take the slow loop)."""

    name = "only-perturb"

    def _perturb(self, flat, rng):
        return flat + torch.from_numpy(rng.standard_normal(flat.numel())), {"marker": float(flat.numel())}

    def guarantee_for(self, d):
        return Guarantee(epsilon=math.inf, holds=False)

    def config(self):
        return {}


class _OnlyRows(Perturbation):
    """A vectorized ``_perturb_rows`` only: ``_perturb`` is one row of it."""

    name = "only-rows"

    def _perturb_rows(self, rows, streams):
        return rows * 2.0 + torch.from_numpy(streams.random(tuple(rows.shape))), {"n": np.full(rows.shape[0], 1.0)}

    def guarantee_for(self, d):
        return Guarantee(epsilon=math.inf, holds=False)

    def config(self):
        return {}


def test_subclass_with_only_perturb_takes_the_slow_path() -> None:
    u = _batch(12)
    p = _OnlyPerturb()
    rows = p.perturb_rows(u, _streams())
    for i, g in enumerate(_streams()):
        single = p.perturb(u[i], g)
        assert torch.equal(rows.vectors[i], single.vector)
        assert rows.metrics["marker"][i] == single.metrics["marker"] == 12.0
    assert rows.claim_holds.all()


def test_subclass_with_only_perturb_rows_serves_perturb() -> None:
    u = _batch(12)
    p = _OnlyRows()
    rows = p.perturb_rows(u, _streams())
    for i, g in enumerate(_streams()):
        assert torch.equal(rows.vectors[i], p.perturb(u[i], g).vector)
    flat_out, metrics = _OnlyRows()._perturb(u[0], stream(1, 1, 1, "x"))
    assert torch.equal(flat_out, u[0] * 2.0 + torch.from_numpy(stream(1, 1, 1, "x").random(12)))
    assert metrics == {"n": 1.0}


def test_subclass_must_implement_a_transform() -> None:
    with pytest.raises(TypeError, match=r"_Nothing must implement _perturb_rows\(rows, streams\).*or _perturb"):
        class _Nothing(Perturbation):  # noqa: F841
            name = "nothing"

            def guarantee_for(self, d):
                return Guarantee(epsilon=math.inf)

            def config(self):
                return {}


# ---------------------------------------------------------------------------------- validation

_P = {"name": "coordinatewise", "mechanism": "laplace", "epsilon": 1.0, "clip_norm": 1.0}


def _bad_nan() -> torch.Tensor:
    u = torch.zeros(7, 5)
    u[2, 1], u[4, 0] = math.nan, math.inf
    return u


@pytest.mark.parametrize("updates, exc, match", [
    (torch.zeros(5), ValueError, r"updates must have shape \(N, d\).*got shape \(5,\)"),
    (torch.zeros(7, 2, 3), ValueError, r"updates must have shape \(N, d\).*got shape \(7, 2, 3\)"),
    (torch.zeros(7, 0), ValueError, r"updates must be non-empty"),
    (torch.zeros(7, 5, dtype=torch.int64), TypeError, r"updates must be a floating-point tensor"),
    (np.zeros((7, 5)), TypeError, r"updates must be a torch.Tensor"),
    (_bad_nan(), ValueError, r"updates must be finite, got 2 NaN/inf value\(s\) in row\(s\) 2, 4"),
])
def test_perturb_rows_rejects_bad_updates_before_drawing(updates, exc: type, match: str) -> None:
    gens = _streams()
    p = get_perturbation(**_P)
    with pytest.raises(exc, match=match):
        p.perturb_rows(updates, gens)
    assert [g.random() for g in gens] == [g.random() for g in _streams()]  # nothing was drawn


def test_perturb_rows_rejects_an_empty_batch() -> None:
    with pytest.raises(ValueError, match=r"updates must be non-empty"):
        get_perturbation(**_P).perturb_rows(torch.zeros(0, 5), [])


@pytest.mark.parametrize("streams, exc, match", [
    (_streams()[:3], ValueError, r"streams must hold one generator per row of updates \(7\), got 3"),
    ([], ValueError, r"streams must hold one generator per row of updates \(7\), got 0"),
    (RowStreams(_streams() * 2), ValueError, r"one generator per row of updates \(7\), got 14"),
    (stream(0, 0, 0, "noise"), TypeError, r"streams must be a fedpriv.rng.RowStreams or a sequence .*got Generator"),
    ([np.random.RandomState(0)] * 7, TypeError, r"streams must be .*got RandomState at index 0"),
    (None, TypeError, r"streams must be a fedpriv.rng.RowStreams"),
    ("noise", TypeError, r"streams must be a fedpriv.rng.RowStreams"),
])
def test_perturb_rows_rejects_bad_streams(streams, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        get_perturbation(**_P).perturb_rows(torch.zeros(7, 5), streams)


def test_geometric_rows_need_two_coordinates() -> None:
    p = get_perturbation("geodp", sigma=1.0, clip_norm=1.0, batch_size=8)
    with pytest.raises(ValueError, match=r"at least 2 coordinates.*got d=1"):
        p.perturb_rows(torch.ones(3, 1), _streams()[:3])


def test_direct_norms_are_trusted_only_when_finite_and_above_the_underflow_bound() -> None:
    rows = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    torch.testing.assert_close(direct_norms(rows), torch.tensor([5.0, 1.0]), rtol=0, atol=0)
    assert direct_norms(torch.tensor([[1.0, float("nan")], [1.0, 0.0]])) is None  # a NaN row
    assert direct_norms(torch.tensor([[1e20, 1e20], [1.0, 0.0]])) is None  # ‖v‖² overflows float32
    assert direct_norms(torch.tensor([[0.0, 0.0], [1.0, 0.0]])) is None  # a zero row: below √(smallest normal)
    assert direct_norms(torch.tensor([[1e-25, 0.0]], dtype=torch.float64)) is not None  # float64's bound is lower
