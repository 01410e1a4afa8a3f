"""The secure-sum core steps (fedpriv.secagg.task): the spec, the clipped signals, the codec."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.secagg.task import (
    SecureSumSpec,
    client_signals,
    codec_for,
    noise_for,
    num_clipped,
)

# --------------------------------------------------------------------------- the spec


@pytest.mark.parametrize("kwargs, match", [
    ({"num_clients": 0}, "num_clients must be >= 1, got 0"),
    ({"dim": 0}, "dim must be >= 1, got 0"),
    ({"clip_norm": 0.0}, "clip_norm must be > 0 and finite, got 0.0"),
    ({"epsilon": -1.0}, "epsilon must be > 0 and finite, got -1.0"),
    ({"delta": 1.0}, r"delta must be in \(0, 1\), got 1.0"),
    ({"omega": 1.0}, r"omega must be in \[0, 1\), got 1.0"),
    ({"mode": "fixed"}, "mode must be one of 'corrected', 'paper', got 'fixed'"),
    ({"aggregator": "secagg+"}, "aggregator must be one of 'oracle', 'protocol', got 'secagg\\+'"),
    ({"dropout_rate": 0.4, "omega": 0.3}, r"dropout_rate must be <= omega = 0.3 \(docs/federated_mf.md §6.5"),
    ({"dropout_rate": -0.1}, r"dropout_rate must be in \[0, 1\), got -0.1"),
    ({"iterations": 0}, "iterations must be >= 1, got 0"),
    ({"seed": -2}, "seed must be >= 0, got -2"),
    ({"data": "mnist"}, "data must be one of 'uniform', 'gaussian', 'poisson', 'cov19-surrogate', got 'mnist'"),
    ({"tails": 0.0}, "tails must be > 0 and finite, got 0.0"),
])
def test_spec_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SecureSumSpec(**kwargs)


def test_client_signals_are_clipped_rows_and_one_row_is_bit_identical_to_the_batch():
    spec = SecureSumSpec(num_clients=50, dim=40, clip_norm=1.5, data="uniform")
    batch = client_signals(spec, spec.client_ids)
    norms = np.linalg.norm(batch, axis=1)
    assert np.all(norms <= 1.5 * (1 + 1e-12))
    assert 0 < num_clipped(spec) == int(np.sum(norms > 1.5 - 1e-9))  # uniform on [-1, 1]^40: most exceed 1.5
    for c in (0, 17, 49):
        np.testing.assert_array_equal(client_signals(spec, [c])[0], batch[c])
    with pytest.raises(ValueError, match=r"client_ids must be in \[0, num_clients=50\), got 50"):
        client_signals(spec, [50])


@pytest.mark.parametrize("mode", ["corrected", "paper"])
def test_codec_covers_the_largest_report_noise(mode):
    spec = SecureSumSpec(num_clients=20, omega=0.25, mode=mode)
    noise, codec = noise_for(spec), codec_for(spec)
    n1 = next(n for n in range(noise.threshold, 21) if noise.zeta2(n) is not None)
    worst = np.hypot(noise.round1_std(), noise.round2_std(n1))
    assert codec.clip_range >= spec.clip_norm + spec.tails * worst * (1 - 1e-12)
    codec.check_capacity(spec.num_clients)
