"""privatize_model_update: a whole model update in named arrays, privatized against the received model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.federated.model_update import privatize_model_update
from fedpriv.perturbation import Coordinatewise, NoPerturbation
from fedpriv.rng import stream


def _models(scale: float = 0.01) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = stream(0, 1, 0, "test-models")
    received = {"conv.weight": rng.normal(size=(2, 3)).astype(np.float32),
                "fc.bias": rng.normal(size=4),  # float64
                "bn.num_batches_tracked": np.array(7, dtype=np.int64)}
    trained = {"conv.weight": (received["conv.weight"] + scale * rng.normal(size=(2, 3))).astype(np.float32),
               "fc.bias": received["fc.bias"] + scale * rng.normal(size=4),
               "bn.num_batches_tracked": np.array(12, dtype=np.int64)}
    return received, trained


def test_layout_round_trips_and_integer_buffers_stay_as_received() -> None:
    received, trained = _models()
    out = privatize_model_update(received, trained, NoPerturbation(clip_norm=10.0), stream(0, 1, 0, "noise"))
    assert list(out.arrays) == list(trained)
    for key, value in trained.items():
        assert out.arrays[key].shape == value.shape and out.arrays[key].dtype == value.dtype
    assert out.kept == ("bn.num_batches_tracked",)
    assert int(out.arrays["bn.num_batches_tracked"]) == 7  # the client's 12 never leaves it
    # no noise and no clipping: received + (trained − received) in float64, cast back to each array's dtype;
    # float32 rounding of the cast is at most half an ulp of values |x| < 8: 2**-21 < 1e-6
    np.testing.assert_allclose(out.arrays["conv.weight"], trained["conv.weight"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(out.arrays["fc.bias"], trained["fc.bias"], rtol=0, atol=1e-12)
    assert math.isinf(out.guarantee.epsilon)


def test_the_update_is_clipped_against_the_received_model() -> None:
    received, trained = _models(scale=1.0)
    c = 0.1
    out = privatize_model_update(received, trained, NoPerturbation(clip_norm=c), stream(0, 1, 0, "noise"))
    floats = ("conv.weight", "fc.bias")
    delta = np.concatenate([(out.arrays[k].astype(np.float64) - received[k]).ravel() for k in floats])
    raw = np.concatenate([(trained[k].astype(np.float64) - received[k]).ravel() for k in floats])
    assert np.linalg.norm(raw) > 10 * c
    # the released update is raw · C/‖raw‖ up to the float32 cast of conv.weight (|x| < 8: 1e-6 absolute)
    np.testing.assert_allclose(delta, raw * c / np.linalg.norm(raw), rtol=0, atol=1e-6)
    assert out.metrics["clipped"] == 1.0


def test_laplace_noise_has_the_mechanisms_mean_and_variance() -> None:
    """Coordinatewise Laplace at ε per update (split): each of the d coordinates, scaled by √d/C to [-1, 1],
    gets Laplace noise of scale 2/(ε/d) (sensitivity 2 over [-1, 1]); in model units its variance is
    σ² = 2·(2d/ε)²·C²/d = 8·d·C²/ε². Tolerances: 5 standard errors of the CLT, the mean's σ/√n and the sample
    variance's σ²·√((κ − 1)/n) with Laplace's kurtosis κ = 6."""
    d, eps, c, reps = 8, 4.0, 1.0, 1500
    received = {"w": np.zeros(d, np.float64)}
    trained = {"w": np.full(d, 0.1 / math.sqrt(d))}  # ‖update‖ = 0.1 < C: not clipped
    pert = Coordinatewise("laplace", eps, clip_norm=c)
    noise = np.stack([privatize_model_update(received, trained, pert, stream(5, r, 0, "noise")).arrays["w"]
                      for r in range(1, reps + 1)]) - trained["w"]
    n = noise.size
    sigma2 = 8 * d * c**2 / eps**2
    assert abs(noise.mean()) < 5 * math.sqrt(sigma2 / n)
    assert abs(noise.var() - sigma2) < 5 * sigma2 * math.sqrt(5 / n)


def test_the_same_key_gives_the_same_bits_and_another_key_other_noise() -> None:
    received, trained = _models()
    pert = Coordinatewise("piecewise", 1.0, clip_norm=1.0)
    a = privatize_model_update(received, trained, pert, stream(1, 2, 3, "noise")).arrays
    b = privatize_model_update(received, trained, pert, stream(1, 2, 3, "noise")).arrays
    c = privatize_model_update(received, trained, pert, stream(1, 2, 4, "noise")).arrays
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["fc.bias"], c["fc.bias"])


@pytest.mark.parametrize("change, match", [
    (lambda t: t.pop("fc.bias"), r"missing \['fc.bias'\], unexpected \[\]"),
    (lambda t: t.update(extra=np.zeros(1)), r"unexpected \['extra'\]"),
    (lambda t: t.update({"fc.bias": np.zeros(5)}), r"array 'fc.bias': shape \(5,\) differs from the received \(4,\)"),
    (lambda t: t.update({"fc.bias": np.array([0.0, np.nan, np.inf, 0.0])}), r"'fc.bias': 2 NaN/inf"),
])
def test_a_trained_model_in_another_layout_is_refused(change, match) -> None:
    received, trained = _models()
    change(trained)
    with pytest.raises(ValueError, match=match):
        privatize_model_update(received, trained, NoPerturbation(), stream(0, 1, 0, "noise"))


def test_a_model_without_floating_arrays_is_refused() -> None:
    with pytest.raises(ValueError, match="no floating-point array"):
        privatize_model_update({"n": np.array(1)}, {"n": np.array(2)}, NoPerturbation(), stream(0, 1, 0, "noise"))
