"""The secure-sum core: its spec and the in-process reference run (fedpriv.secagg.task)."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.secagg.task import (
    SecureSumSpec,
    client_signals,
    codec_for,
    noise_for,
    num_clipped,
    run_secure_sum,
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


def test_protocol_and_oracle_runs_release_the_same_sums_to_the_quantization():
    kw = {"num_clients": 10, "dim": 6, "dropout_rate": 0.1, "omega": 0.3, "iterations": 3, "seed": 5}
    oracle = run_secure_sum(SecureSumSpec(aggregator="oracle", **kw))
    proto = run_secure_sum(SecureSumSpec(aggregator="protocol", **kw))
    step = codec_for(SecureSumSpec(**kw)).step
    for a, b in zip(oracle.sums, proto.sums, strict=True):
        assert (a.n1, a.n2, a.halted) == (b.n1, b.n2, b.halted)
        if not a.halted:
            assert np.all(np.abs(a.total - b.total) <= (a.n1 + a.n2) * step)
    assert oracle.ledger == proto.ledger
    # the estimate is S/n1 and its target the mean over the round-1 survivors U¹ (not over all n)
    spec = proto.spec
    for s, est, true in zip(proto.sums, proto.estimates, proto.true_means, strict=True):
        if s.halted:
            assert est is None and true is None
            continue
        np.testing.assert_array_equal(est, s.total / s.n1)
        np.testing.assert_array_equal(true, client_signals(spec, s.round1.survivors).mean(axis=0))
    assert any(not s.halted and s.n1 < spec.num_clients for s in proto.sums)


@pytest.mark.parametrize("mode, rate", [("corrected", 0.0), ("corrected", 0.1), ("paper", 0.0), ("paper", 0.1)])
def test_the_estimate_error_has_the_predicted_variance(mode, rate):
    """(estimate − true mean)·n1/estimate_std is N(0, 1) per coordinate: mean square 1 ± 5·√(2/d)."""
    d = 4000
    spec = SecureSumSpec(num_clients=30, dim=d, omega=0.3, mode=mode, dropout_rate=rate, iterations=2, seed=1)
    result = run_secure_sum(spec)
    z2 = [((e - m) * s.n1 / s.estimate_std) ** 2
          for e, m, s in zip(result.estimates, result.true_means, result.sums, strict=True) if e is not None]
    assert z2, "every iteration halted: pick another seed"
    mean_sq = np.mean(np.concatenate(z2))
    assert abs(mean_sq - 1.0) <= 5 * np.sqrt(2.0 / (d * len(z2)))
    # corrected mode never charges less noise than calibrated; paper mode leaks (docs/federated_mf.md §6.4)
    if mode == "corrected":
        assert result.ledger["epsilon"] <= spec.epsilon * (1 + 1e-9)
    elif rate == 0.0:
        assert result.ledger["epsilon"] > spec.epsilon
