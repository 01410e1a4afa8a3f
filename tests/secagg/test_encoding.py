"""Fixed-point codec (docs/federated_mf.md §6.6): unbiased stochastic rounding, capacity, noise and overflow checks."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.rng import stream
from fedpriv.secagg.encoding import (
    EncodingOverflowError,
    FixedPointCodec,
    required_clip_range,
)


def test_for_clients_picks_the_finest_codec_that_cannot_wrap() -> None:
    codec = FixedPointCodec.for_clients(3.0, 1000)
    assert codec.levels == 2**32 and codec.modulus == 2**64 and codec.step == 6.0 / 2**32
    small = FixedPointCodec.for_clients(1.0, 10, modulus_bits=16)
    assert small.levels == (2**16 - 1) // 10 and small.max_clients() == 10
    small.check_capacity(10)
    with pytest.raises(ValueError, match="num_clients = 11, levels = 6553, modulus_bits = 16; at most 10 clients"):
        small.check_capacity(11)


def test_round_trip_within_one_step() -> None:
    codec = FixedPointCodec(clip_range=2.0, levels=1000, modulus_bits=32)
    x = np.linspace(-2.0, 2.0, 501)
    enc = codec.encode(x, stream(0, 0, 0, "enc"))
    assert enc.dtype == np.uint32 == codec.word_dtype and enc.min() == 0 and enc.max() == 1000
    assert FixedPointCodec(clip_range=2.0, levels=1000, modulus_bits=33).encode(x, stream(0, 0, 0, "enc")).dtype \
        == np.uint64
    assert np.all(np.abs(codec.decode_sum(enc, 1) - x) < codec.step)


def test_stochastic_rounding_is_unbiased() -> None:
    # decode(encode(x)) − x is (frac − Bernoulli(frac))·step: mean 0, variance frac(1−frac)·step².
    # Averaged over K draws, each coordinate must be within 5 standard errors of x.
    codec = FixedPointCodec(clip_range=1.0, levels=10, modulus_bits=32)
    x = np.linspace(-0.97, 0.97, 40)
    k = 20_000
    enc = codec.encode(np.tile(x, k), stream(1, 0, 0, "unbiased")).reshape(k, x.size)
    mean = codec.decode_sum(enc.sum(axis=0).astype(np.uint64), k) / k
    frac = (x + 1.0) / codec.step % 1.0
    se = np.sqrt(frac * (1 - frac)) * codec.step / np.sqrt(k)
    assert np.all(se > 0)
    assert np.all(np.abs(mean - x) <= 5 * se)


def test_decode_sum_of_many_reports() -> None:
    codec = FixedPointCodec.for_clients(1.0, 50, modulus_bits=32)
    x = np.random.default_rng(3).uniform(-1, 1, (50, 30))
    total = sum(codec.encode(row, stream(2, 0, i, "enc")) for i, row in enumerate(x)) & np.uint64(2**32 - 1)
    assert np.all(np.abs(codec.decode_sum(total, 50) - x.sum(axis=0)) < 50 * codec.step)
    with pytest.raises(ValueError, match="total must be <= count·levels"):
        codec.decode_sum(total, 1)


def test_overflow_is_reported_never_clipped() -> None:
    codec = FixedPointCodec(clip_range=1.0, levels=10, modulus_bits=16)
    codec.encode(np.array([-1.0, 1.0]), stream(0, 0, 0, "enc"))  # the ends are inside
    with pytest.raises(EncodingOverflowError, match=r"got 2 coordinate\(s\) outside \(largest \|x\| = 3.5\)"):
        codec.encode(np.array([0.0, 1.5, -3.5]), stream(0, 0, 0, "enc"))
    assert issubclass(EncodingOverflowError, ValueError)


def test_noise_check() -> None:
    assert required_clip_range(2.0, 0.5) == 6.0
    assert required_clip_range(2.0, 0.5, tails=4.0) == 4.0
    FixedPointCodec(clip_range=6.0, levels=10, modulus_bits=16).check_noise(2.0, 0.5)
    with pytest.raises(ValueError, match="clipping range too small for the configured noise"):
        FixedPointCodec(clip_range=5.9, levels=10, modulus_bits=16).check_noise(2.0, 0.5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"clip_range": 0.0, "levels": 10, "modulus_bits": 16}, "clip_range must be > 0 and finite, got 0.0"),
        ({"clip_range": float("nan"), "levels": 10, "modulus_bits": 16}, "clip_range must be > 0 and finite"),
        ({"clip_range": 1.0, "levels": 0, "modulus_bits": 16}, "levels must be >= 1, got 0"),
        ({"clip_range": 1.0, "levels": 2**16, "modulus_bits": 16}, "levels must be <= 65535, got 65536"),
        ({"clip_range": 1.0, "levels": 10, "modulus_bits": 7}, "modulus_bits must be >= 8, got 7"),
        ({"clip_range": 1.0, "levels": 10, "modulus_bits": 65}, "modulus_bits must be <= 64, got 65"),
    ],
)
def test_codec_errors(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        FixedPointCodec(**kwargs)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda c: FixedPointCodec.for_clients(1.0, 200, modulus_bits=8), ValueError,
         "num_clients must be <= 127 for modulus_bits = 8"),
        (lambda c: c.encode(np.zeros((2, 2)), stream(0, 0, 0, "e")), ValueError, "x must be a 1-D array"),
        (lambda c: c.encode(np.array([np.nan]), stream(0, 0, 0, "e")), ValueError, "x must be finite"),
        (lambda c: c.encode(np.zeros(2), 0), TypeError, "rng must be a numpy.random.Generator"),
        (lambda c: c.decode_sum(np.zeros(2), 1), ValueError, "total must be a 1-D unsigned integer array"),
        (lambda c: c.check_noise(-1.0, 0.1), ValueError, "signal_bound must be >= 0"),
        (lambda c: required_clip_range(1.0, 1.0, tails=0.0), ValueError, "tails must be > 0"),
    ],
)
def test_other_errors(call, exc, match) -> None:
    with pytest.raises(exc, match=match):
        call(FixedPointCodec(clip_range=1.0, levels=10, modulus_bits=16))
