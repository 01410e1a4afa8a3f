"""CounterRows, the keyed counter-based generator of the LDP-SGD noise (fedpriv/rng.py, docs/design.md §4).

Statistical tests use fixed keys and CLT tolerances: a sample mean of n values is within 5 standard
errors of its expectation (a two-sided 5σ event has probability 6e-7), a sample variance within 5
standard errors sqrt((μ4 − σ⁴)/n), a Kolmogorov–Smirnov distance within 1.95/√n (the 0.1% critical
value), and a correlation of independent rows within 5/√n.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import fedpriv.rng as rng_module
from fedpriv.federated.batched import resolve_device
from fedpriv.rng import CounterRows, check_draws

N_VALUES = 200_000
GAMMA, MIX1, MIX2, U64 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 2**64 - 1


def _splitmix(key: int, counter: int) -> int:
    """Reference SplitMix64 (Steele, Lea & Flood 2014): output ``counter`` (1-based) of the stream seeded ``key``."""
    z = (key + counter * GAMMA) & U64
    z = ((z ^ (z >> 30)) * MIX1) & U64
    z = ((z ^ (z >> 27)) * MIX2) & U64
    return z ^ (z >> 31)


def test_outputs_are_splitmix64_of_the_row_key_bit_for_bit() -> None:
    """torch's int64 arithmetic gives the reference's 64-bit words: uniforms are their top 53 bits."""
    rows = CounterRows.keyed(11, 3, [0, 2**64 - 1, 12345], "noise")
    keys = [int(k) & U64 for k in rows.keys.tolist()]
    rows.position = 5
    got = rows.uniform(4).numpy()
    want = np.array([[(_splitmix(k, 5 + c) >> 11) * 2.0**-53 for c in range(1, 5)] for k in keys])
    assert np.array_equal(got, want)
    assert rows.position == 9


def _calls(rows: CounterRows) -> list[np.ndarray]:
    """A sequence of draws as a mechanism makes them (several calls, several kinds)."""
    n = len(rows)
    return [rows.random((n, 3)), rows.standard_normal((n, 7)), rows.laplace(0.0, 2.0, (n, 5)),
            rows.normal(9, torch.float32).numpy(), rows.laplace_tensor(4, torch.float32).numpy()]


@pytest.mark.parametrize("block", [1, 7, 1 << 20])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_client_draws_the_same_alone_or_in_a_batch(block: int, threads: int, monkeypatch) -> None:
    """Row i of a batch is client i's draws alone, at any position in the batch, block size and thread count."""
    monkeypatch.setattr(rng_module, "_WORD_BLOCK", block)
    ids = [5, 0, 2**63, 17, 3, 99]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        batch = _calls(CounterRows.keyed(7, 2, ids, "noise-step-1"))
        for i in (0, 2, 5):
            alone = _calls(CounterRows.keyed(7, 2, [ids[i]], "noise-step-1"))
            for b, a in zip(batch, alone):
                assert np.array_equal(b[i], a[0])
        whole = CounterRows.keyed(7, 2, ids, "noise-step-1")
        part = whole.rows(2, 5)
        assert np.array_equal(part.normal(9).numpy(), whole.normal(9).numpy()[2:5])
    finally:
        torch.set_num_threads(before)


def _moments_ok(x: np.ndarray, mean: float, var: float, mu4: float) -> None:
    n = x.size
    assert abs(x.mean() - mean) <= 5 * math.sqrt(var / n)
    assert abs(x.var() - var) <= 5 * math.sqrt((mu4 - var**2) / n)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_normal_and_laplace_have_their_distributions(dtype: torch.dtype) -> None:
    rows = CounterRows.keyed(3, 1, np.arange(40), "noise")
    z = rows.normal(N_VALUES // 40, dtype).double().numpy().ravel()
    _moments_ok(z, 0.0, 1.0, 3.0)
    assert stats.kstest(z, "norm").statistic <= 1.95 / math.sqrt(z.size)
    lap = rows.laplace_tensor(N_VALUES // 40, dtype).double().numpy().ravel()
    _moments_ok(lap, 0.0, 2.0, 24.0)  # Laplace(1): variance 2, fourth moment 4!·1 = 24
    assert stats.kstest(lap, "laplace").statistic <= 1.95 / math.sqrt(lap.size)
    u = rows.random((40, N_VALUES // 40)).ravel()
    _moments_ok(u, 0.5, 1 / 12, 1 / 80)
    assert stats.kstest(u, "uniform").statistic <= 1.95 / math.sqrt(u.size)


@pytest.mark.parametrize("other", [(3, 1, [1], "noise"), (3, 2, [0], "noise"), (3, 1, [0], "noise-step-1"),
                                   (4, 1, [0], "noise")])
def test_rows_clients_rounds_purposes_and_seeds_are_uncorrelated(other: tuple) -> None:
    a = CounterRows.keyed(3, 1, [0], "noise").normal(N_VALUES)[0].numpy()
    b = CounterRows.keyed(*other).normal(N_VALUES)[0].numpy()
    assert abs(np.corrcoef(a, b)[0, 1]) <= 5 / math.sqrt(N_VALUES)
    successive = CounterRows.keyed(3, 1, [0], "noise")
    first, second = successive.normal(N_VALUES)[0].numpy(), successive.normal(N_VALUES)[0].numpy()
    assert abs(np.corrcoef(first, second)[0, 1]) <= 5 / math.sqrt(N_VALUES)  # later calls: fresh words


def test_float32_draws_are_the_float64_draws_rounded() -> None:
    """float32 evaluates the same words: Laplace −ln u within 4 ulps of |value| + 36.1 (the ln's constant 52 ln 2), and
    normals, where the radius r ≥ 0.1, within 1e-4 (r² = 80 ln 2 − 2 ln(k + ½) loses ≤ 4·2⁻²⁴·56 ≈ 1.3e-5
    absolutely to cancellation, so r loses ≤ 1.3e-5/(2r) ≤ 6.7e-5, plus float32 cos/sin of the angle)."""
    rows = lambda: CounterRows.keyed(9, 4, np.arange(20), "noise")  # noqa: E731
    l64, l32 = rows().laplace_tensor(5000), rows().laplace_tensor(5000, torch.float32).double()
    assert ((l32 - l64).abs() <= 4 * 2.0**-24 * (l64.abs() + 36.1)).all()
    z64, z32 = rows().normal(5000), rows().normal(5000, torch.float32).double()
    pairs = 2500
    r = torch.hypot(z64[:, :pairs], z64[:, pairs:]).repeat(1, 2)
    assert ((z32 - z64).abs()[r >= 0.1] <= 1e-4).all()


def test_counter_rows_validate_their_arguments() -> None:
    with pytest.raises(ValueError, match="client_ids"):
        CounterRows.keyed(1, 1, [-1], "noise")
    with pytest.raises(TypeError, match="keys must be"):
        CounterRows(torch.zeros(3))
    with pytest.raises(ValueError, match="first entry"):
        CounterRows.keyed(1, 1, [1, 2], "noise").random((3, 2))
    with pytest.raises(AttributeError, match="integers"):
        CounterRows.keyed(1, 1, [1], "noise").integers(3)  # noqa: B018
    assert check_draws(CounterRows.keyed(1, 1, [1], "noise")) is not None


def test_device_cuda_without_a_gpu_names_the_key(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="run-config key 'device'"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu"
    with pytest.raises(ValueError, match="'cpu', 'cuda' or 'auto'"):
        resolve_device("tpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_draws_the_cpu_bits() -> None:
    """The integer words are exact on any device; float64 transcendental functions differ by a few ulps."""
    cpu = CounterRows.keyed(5, 1, np.arange(8), "noise")
    gpu = CounterRows.keyed(5, 1, np.arange(8), "noise", device="cuda")
    assert torch.equal(cpu.uniform(100), gpu.uniform(100).cpu())
    assert torch.allclose(cpu.normal(100), gpu.normal(100).cpu(), rtol=1e-12, atol=1e-12)


def test_uniform_bits_are_the_uniforms_integers_and_sort_as_they_do() -> None:
    bits = CounterRows.keyed(3, 2, [0, 7, 9], "batch").uniform_bits(400)
    uniform = CounterRows.keyed(3, 2, [0, 7, 9], "batch").uniform(400)
    assert bits.dtype == torch.int64 and int(bits.min()) >= 0 and int(bits.max()) < 2**53
    assert torch.equal(bits.to(torch.float64) * 2.0**-53, uniform)  # exact: 53-bit integers are float64s
    assert torch.equal(torch.argsort(bits, dim=-1, stable=True), torch.argsort(uniform, dim=-1, stable=True))
