"""Fixed-point encoding of real reports for secure aggregation mod ``M = 2^b`` (docs/federated_mf.md §6.6).

A report ``x ∈ [−B, B]^d`` is shifted and scaled to ``z = (x + B)/step`` with ``step = 2B/L``, then
stochastically rounded to an integer in ``[0, L]`` (``⌊z⌋ + 1`` with probability ``z − ⌊z⌋``), so
``E[decode(encode(x))] = x`` exactly and the rounding error of one coordinate is below one step.
The server decodes a sum of ``n`` encodings as ``Σx = total·step − n·B``, which is exact as long
as the integer sum never wraps: :meth:`FixedPointCodec.check_capacity` requires ``n·L < M``.

Guarantees: values outside ``[−B, B]`` raise :class:`EncodingOverflowError` (never clipped
silently: clipping a noisy report would make the sum's noise non-Gaussian and break the DP
argument, §6.6); :meth:`FixedPointCodec.check_noise` rejects a clipping range too small for the
configured noise (§6.6 suggests ``B = 2R^{3/2} + 8·√ζ₁·σ_v``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_int, check_positive
from fedpriv.errors import FedprivError

__all__ = ["EncodingOverflowError", "FixedPointCodec", "required_clip_range"]


class EncodingOverflowError(FedprivError, ValueError):
    """A report has coordinates outside the codec's clipping range ``[−B, B]``."""


def required_clip_range(signal_bound: float, noise_std: float, tails: float = 8.0) -> float:
    """Smallest clipping range ``B = signal_bound + tails·noise_std`` (§6.6: ``2R^{3/2} + 8√ζ₁σ_v``)."""
    signal_bound = check_positive(signal_bound, "signal_bound", allow_zero=True)
    noise_std = check_positive(noise_std, "noise_std", allow_zero=True)
    tails = check_positive(tails, "tails")
    return signal_bound + tails * noise_std


@dataclass(frozen=True)
class FixedPointCodec:
    """Stochastic-rounding fixed-point codec into ``Z_M``, ``M = 2^modulus_bits`` (docs/federated_mf.md §6.6).

    Parameters
    ----------
    clip_range : float
        ``B > 0``: reports must lie in ``[−B, B]``.
    levels : int
        ``L >= 1``: encoded values are integers in ``[0, L]``, one step is ``2B/L``.
    modulus_bits : int
        ``b`` in [8, 64]; sums are computed mod ``M = 2^b``. ``L < M`` is required.
    """

    clip_range: float
    levels: int
    modulus_bits: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "clip_range", check_positive(self.clip_range, "clip_range"))
        bits = check_int(self.modulus_bits, "modulus_bits", minimum=8, maximum=64)
        object.__setattr__(self, "modulus_bits", bits)
        object.__setattr__(self, "levels", check_int(self.levels, "levels", minimum=1, maximum=(1 << bits) - 1))

    @property
    def modulus(self) -> int:
        """``M = 2^modulus_bits`` (a Python int: 2^64 does not fit in uint64)."""
        return 1 << self.modulus_bits

    @property
    def word_dtype(self) -> type[np.unsignedinteger]:
        """The unsigned integer type of encodings and masked uploads: uint32 up to 32 modulus bits, else uint64."""
        return np.uint32 if self.modulus_bits <= 32 else np.uint64

    @property
    def step(self) -> float:
        """Quantization step ``2B/L``."""
        return 2.0 * self.clip_range / self.levels

    @classmethod
    def for_clients(
        cls, clip_range: float, num_clients: int, *, modulus_bits: int = 64, precision_bits: int = 32
    ) -> FixedPointCodec:
        """The finest codec whose sum over ``num_clients`` cannot wrap: ``L = min(2^precision_bits, (M−1)//n)``."""
        n = check_int(num_clients, "num_clients", minimum=1)
        bits = check_int(modulus_bits, "modulus_bits", minimum=8, maximum=64)
        precision_bits = check_int(precision_bits, "precision_bits", minimum=1, maximum=64)
        levels = min(1 << precision_bits, ((1 << bits) - 1) // n)
        if levels < 2:
            raise ValueError(
                f"num_clients must be <= {((1 << bits) - 1) // 2} for modulus_bits = {bits} "
                f"(at least 2 levels per client), got {n}"
            )
        return cls(clip_range=clip_range, levels=levels, modulus_bits=bits)

    def max_clients(self) -> int:
        """Largest ``n`` with ``n·L < M`` (the sum of ``n`` encodings cannot wrap the modulus)."""
        return (self.modulus - 1) // self.levels

    def check_capacity(self, num_clients: int) -> None:
        """Raise if ``num_clients·L >= M``: the sum of that many encodings could wrap the modulus."""
        n = check_int(num_clients, "num_clients", minimum=1)
        if n * self.levels >= self.modulus:
            raise ValueError(
                f"num_clients × levels must be < 2^modulus_bits so the sum cannot wrap the modulus: "
                f"num_clients = {n}, levels = {self.levels}, modulus_bits = {self.modulus_bits}; "
                f"at most {self.max_clients()} clients fit (use FixedPointCodec.for_clients)"
            )

    def check_noise(self, signal_bound: float, noise_std: float, *, tails: float = 8.0) -> None:
        """Raise if ``B < signal_bound + tails·noise_std``: clipping range too small for the configured noise."""
        needed = required_clip_range(signal_bound, noise_std, tails)
        if self.clip_range < needed:
            raise ValueError(
                f"clip_range must be >= signal_bound + tails·noise_std = {signal_bound!r} + {tails!r}·{noise_std!r} "
                f"= {needed!r} (clipping range too small for the configured noise, docs/federated_mf.md §6.6), "
                f"got {self.clip_range!r}"
            )

    def encode(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Stochastically rounded encoding of ``x`` (d,) in ``[−B, B]``: values in ``[0, L]`` (:attr:`word_dtype`)."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator (fedpriv.rng.stream), got {type(rng).__name__}")
        arr = check_array(x, "x")
        if arr.ndim != 1:
            raise ValueError(f"x must be a 1-D array, got shape {arr.shape}")
        b = self.clip_range
        if arr.size and (arr.min() < -b or arr.max() > b):
            outside = np.abs(arr) > b
            raise EncodingOverflowError(
                f"x must lie in [-clip_range, clip_range] = [{-b!r}, {b!r}], got {int(outside.sum())} "
                f"coordinate(s) outside (largest |x| = {float(np.abs(arr).max())!r}); values are never "
                f"clipped silently: raise clip_range (see required_clip_range)"
            )
        # §6.6: shift to [0, 2B], scale to [0, L]; the clip only absorbs float rounding at the ends
        z = arr + b  # one temporary, updated in place below
        z *= self.levels / (2.0 * b)
        np.clip(z, 0.0, float(self.levels), out=z)
        low = np.floor(z)
        z -= low  # frac(z)
        low += rng.random(z.shape) < z  # round up with probability frac(z): unbiased
        return low.astype(self.word_dtype)

    def decode_sum(self, total: Any, count: int) -> np.ndarray:
        """``Σx = total·step − count·B`` from the mod-M sum ``total`` (unsigned) of ``count`` encodings."""
        count = check_int(count, "count", minimum=0)
        t = np.asarray(total)
        if not np.issubdtype(t.dtype, np.unsignedinteger) or t.ndim != 1:
            raise ValueError(f"total must be a 1-D unsigned integer array, got shape {t.shape} dtype {t.dtype}")
        if count:
            self.check_capacity(count)
        if t.size and int(t.max()) > count * self.levels:
            raise ValueError(
                f"total must be <= count·levels = {count * self.levels} (a sum of {count} encodings), "
                f"got {int(t.max())}: the masks were not removed correctly"
            )
        return t.astype(np.float64) * self.step - count * self.clip_range
