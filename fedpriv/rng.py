"""Keyed random streams (docs/design.md §4).

Every random draw in fedpriv comes from a stream keyed by ``(run_seed, round, client_id, purpose)``.
The same key gives the same bits in any process (a Flower ClientApp, the fast engine, a test),
another key gives an independent stream. No global random state is read or written.

Keys are fed to :class:`numpy.random.SeedSequence` as ``entropy=run_seed`` and
``spawn_key=(round, client_id, purpose_id)``; ``purpose_id`` is a stable 64-bit hash of the
purpose string (SHA-256, not Python's salted ``hash``). numpy streams use the Philox
counter-based bit generator; torch streams are ``torch.Generator`` objects seeded with 64 bits
drawn from the same SeedSequence. :class:`RowStreams` bundles one such stream per row of a batch
(one client per row), so a vectorized draw of shape ``(N, ...)`` gives each row its client's bits.
:class:`StreamRows` is the other way round: a batch drew all its rows from *one* stream, and one
client reproduces its own rows of those draws without drawing the others' (Philox is counter-based,
so the words of a row are reached by moving the counter; :mod:`fedpriv.stream_rows`).

:class:`CounterRows` is the vectorized keyed generator of the batched and single-client LDP-SGD
releases: each row's 64-bit key is derived from ``(run_seed, round, client_id, purpose)`` with torch
integer operations for all rows at once, and value j of a draw is a hash of (key, counter j), so a
row's draws depend only on its key and the column, never on the other rows, the device or the
thread count (docs/design.md §4).

Examples
--------
>>> from fedpriv.rng import stream
>>> a = stream(7, 1, 3, "noise").random(2)
>>> b = stream(7, 1, 3, "noise").random(2)
>>> bool((a == b).all())
True
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from fedpriv._validation import check_int
from fedpriv.stream_rows import StreamRows, row_shape

if TYPE_CHECKING:  # torch is imported where a torch stream is made, so numpy-only users never load it
    import torch

__all__ = [
    "CounterRows",
    "Draws",
    "KeyedRNG",
    "RowDraws",
    "RowStreams",
    "SERVER",
    "StreamRows",
    "check_draws",
    "purpose_id",
    "seed_sequence",
    "stream",
    "torch_stream",
]

#: ``client_id`` used for draws made by the server (sampling clients, server-side noise).
SERVER = 2**63 - 1


def purpose_id(purpose: str) -> int:
    """Stable 64-bit integer for a purpose name ("noise", "batch", "init", ...)."""
    if not isinstance(purpose, str) or not purpose:
        raise TypeError(f"purpose must be a non-empty string, got {purpose!r}")
    return int.from_bytes(hashlib.sha256(purpose.encode("utf-8")).digest()[:8], "little")


def seed_sequence(run_seed: int, server_round: int, client_id: int, purpose: str) -> np.random.SeedSequence:
    """The SeedSequence behind the stream keyed by ``(run_seed, server_round, client_id, purpose)``."""
    run_seed = check_int(run_seed, "run_seed", minimum=0)
    server_round = check_int(server_round, "server_round", minimum=0)
    client_id = check_int(client_id, "client_id", minimum=0, maximum=2**64 - 1)
    return np.random.SeedSequence(entropy=run_seed, spawn_key=(server_round, client_id, purpose_id(purpose)))


def stream(run_seed: int, server_round: int, client_id: int, purpose: str) -> np.random.Generator:
    """A numpy ``Generator`` (Philox) keyed by ``(run_seed, server_round, client_id, purpose)``."""
    return np.random.Generator(np.random.Philox(seed_sequence(run_seed, server_round, client_id, purpose)))


def torch_stream(
    run_seed: int, server_round: int, client_id: int, purpose: str, device: str | torch.device = "cpu"
) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` keyed by ``(run_seed, server_round, client_id, purpose)``."""
    import torch

    words = seed_sequence(run_seed, server_round, client_id, purpose).generate_state(2, dtype=np.uint32)
    seed = (int(words[0]) << 32 | int(words[1])) & (2**63 - 1)  # torch seeds must fit in int64
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


@dataclass(frozen=True)
class KeyedRNG:
    """A run's source of keyed streams: ``KeyedRNG(run_seed).numpy(round, client, purpose)``."""

    run_seed: int

    def __post_init__(self) -> None:
        check_int(self.run_seed, "run_seed", minimum=0)

    def numpy(self, server_round: int, client_id: int, purpose: str) -> np.random.Generator:
        """numpy stream for this run and key."""
        return stream(self.run_seed, server_round, client_id, purpose)

    def torch(
        self, server_round: int, client_id: int, purpose: str, device: str | torch.device = "cpu"
    ) -> torch.Generator:
        """torch stream for this run and key."""
        return torch_stream(self.run_seed, server_round, client_id, purpose, device)


class RowStreams:
    """One keyed numpy stream per row of a batch: a draw of shape (N, *s) takes row i from stream i.

    Row ``i`` of ``streams.<method>(size)`` is exactly ``generators[i].<method>(size[1:])``, so a
    batched transform that draws through a ``RowStreams`` reproduces, row by row, the bits of the
    same transform run on each client alone with its own Generator (docs/design.md §4). Only
    :meth:`random`, :meth:`standard_normal` and :meth:`laplace` exist; any other Generator method
    raises ``AttributeError``, so code that draws differently fails instead of mixing streams.

    Examples
    --------
    >>> from fedpriv.rng import RowStreams, stream
    >>> rows = RowStreams.keyed(7, 1, [3, 4], "noise").random((2, 5))
    >>> bool((rows[1] == stream(7, 1, 4, "noise").random(5)).all())
    True
    """

    __slots__ = ("generators",)

    generators: tuple[np.random.Generator, ...]

    def __init__(self, generators: Sequence[np.random.Generator]) -> None:
        if isinstance(generators, np.random.Generator) or not isinstance(generators, Sequence):
            raise TypeError(
                "generators must be a sequence of numpy.random.Generator (one per row), "
                f"got {type(generators).__name__}"
            )
        gens = tuple(generators)
        if not gens:
            raise ValueError("generators must be non-empty (one numpy.random.Generator per row), got 0")
        for i, g in enumerate(gens):
            if not isinstance(g, np.random.Generator):
                raise TypeError(
                    f"generators must hold numpy.random.Generator objects, got {type(g).__name__} at index {i}"
                )
        self.generators = gens

    @classmethod
    def keyed(cls, run_seed: int, server_round: int, client_ids: Sequence[int], purpose: str) -> RowStreams:
        """Row i draws from ``stream(run_seed, server_round, client_ids[i], purpose)``."""
        return cls([stream(run_seed, server_round, c, purpose) for c in client_ids])

    def __len__(self) -> int:
        return len(self.generators)

    def __repr__(self) -> str:
        return f"RowStreams(<{len(self.generators)} generators>)"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"RowStreams has no attribute {name!r}: only random, standard_normal and laplace draw row-wise"
        )

    def _size(self, size: Any) -> tuple[int, ...]:
        """The batched shape as a tuple of ints, checked to lead with N = len(self)."""
        n = len(self.generators)
        if size is None:
            raise ValueError(f"size must be a shape whose first entry is the number of rows {n}, got None")
        try:
            shape = (operator.index(size),) if not isinstance(size, (tuple, list)) else tuple(map(operator.index, size))
        except TypeError as exc:
            raise TypeError(f"size must be an int or a tuple of ints, got {size!r}") from exc
        if not shape or shape[0] != n:
            raise ValueError(f"size must have first entry equal to the number of rows {n}, got {shape}")
        return shape

    def random(self, size: Any) -> np.ndarray:
        """Uniform [0, 1) floats of shape ``size``; row i from ``generators[i].random(size[1:])``."""
        shape = self._size(size)
        if len(self.generators) == 1:  # one row: the generator fills C-order, same bits as row-wise
            return self.generators[0].random(shape)
        out = np.empty(shape)
        for i, g in enumerate(self.generators):
            g.random(out=out[i, ...])
        return out

    def standard_normal(self, size: Any = None) -> np.ndarray:
        """Standard normal floats of shape ``size``; row i from ``generators[i].standard_normal(size[1:])``."""
        shape = self._size(size)
        if len(self.generators) == 1:
            return self.generators[0].standard_normal(shape)
        out = np.empty(shape)
        for i, g in enumerate(self.generators):
            g.standard_normal(out=out[i, ...])
        return out

    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> np.ndarray:
        """Laplace(loc, scale) floats of shape ``size``; row i from ``generators[i].laplace(loc_i, scale_i, size[1:])``.

        ``loc`` and ``scale`` broadcast against ``size``; row i gets row i of each.
        """
        shape = self._size(size)
        if len(self.generators) == 1:
            return self.generators[0].laplace(loc, scale, shape)
        scalar = np.ndim(loc) == 0 and np.ndim(scale) == 0
        locs = loc if scalar else np.broadcast_to(loc, shape)
        scales = scale if scalar else np.broadcast_to(scale, shape)
        out = np.empty(shape)
        for i, g in enumerate(self.generators):  # numpy's laplace has no ``out=``
            out[i] = g.laplace(locs if scalar else locs[i], scales if scalar else scales[i], shape[1:])
        return out


# multiplies int64 modulo 2^64 and has no unsigned shift, so x >>> s is (x >> s) & (2^(64−s) − 1).
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_U64 = 2**64 - 1
#: 64-bit words a CounterRows draw evaluates at a time (its int64 temporaries stay in cache).
_WORD_BLOCK = 1 << 20


def _as_int64(word: int) -> int:
    """A 64-bit word as the int64 with the same bits."""
    word &= _U64
    return word - 2**64 if word >= 2**63 else word


def _mix_int(z: int) -> int:
    """SplitMix64's finalizer on a Python int (exact 64-bit arithmetic)."""
    z &= _U64
    z = ((z ^ (z >> 30)) * _MIX1) & _U64
    z = ((z ^ (z >> 27)) * _MIX2) & _U64
    return z ^ (z >> 31)


def _absorb(h: int, word: int) -> int:
    """One key word folded into the running key hash."""
    return _mix_int((h + _GAMMA) ^ (word & _U64))


def _mix_(z: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finalizer, in place on an int64 tensor (the same bits as :func:`_mix_int`)."""
    for shift, multiplier in ((30, _MIX1), (27, _MIX2), (31, 0)):
        z.bitwise_xor_(_shift_right(z, shift, scratch))
        if multiplier:
            z.mul_(_as_int64(multiplier))
    return z


def _shift_right(z: torch.Tensor, bits: int, out: torch.Tensor) -> torch.Tensor:
    """``z >>> bits`` (logical shift of the 64-bit words) written into ``out``."""
    import torch

    return torch.bitwise_right_shift(z, bits, out=out).bitwise_and_((1 << (64 - bits)) - 1)


def _is_single(dtype: torch.dtype | None) -> bool:
    """Whether a draw in ``dtype`` takes the float32 construction (float32 and the half types)."""
    import torch

    return dtype in (torch.float32, torch.float16, torch.bfloat16)


class CounterRows:
    """Keyed counter-based draws for a batch of rows: row i's values depend only on its key and the column.

    Row i's key is a hash of ``(run_seed, server_round, client_ids[i], purpose)`` (SplitMix64's
    finalizer folded over the words, the client's word last, vectorized over rows). A call that
    draws ``n`` values per row uses outputs ``position + 1 ..`` of the SplitMix64 stream seeded with
    the row's key (one output per value; per pair of normals) and moves ``position`` past them, so
    a client's draws are the same bits computed alone or in any batch (any position, any block), on
    any CPU, thread count and device.

    Uniforms take 53 bits; where a logarithm follows they never reach 0: ``(k + ½)·2⁻ᵇ`` for a b-bit
    integer k. Normals are Box–Muller pairs, one output a pair (40 bits for the radius, 24 for the
    angle; value j < P = ⌈n/2⌉ is r·cos θ of pair j, value P + j its r·sin θ); Laplace values are the
    sign bit times −ln of a 52-bit uniform. Tails reach 7.5σ and 36.7 scales (docs/design.md §4.1
    says why that suffices). A float32 draw is the float64 draw evaluated in float32: the two
    agree to float32 rounding.

    The numpy-style methods :meth:`random`, :meth:`standard_normal` and :meth:`laplace` return float64
    arrays of shape ``(N, ...)`` like :class:`RowStreams`, so every mechanism draws through them.

    Examples
    --------
    >>> from fedpriv.rng import CounterRows
    >>> both = CounterRows.keyed(7, 1, [3, 4], "noise").random((2, 5))
    >>> alone = CounterRows.keyed(7, 1, [4], "noise").random((1, 5))
    >>> bool((both[1] == alone[0]).all())
    True
    """

    __slots__ = ("keys", "position")

    keys: torch.Tensor
    position: int

    def __init__(self, keys: torch.Tensor, position: int = 0) -> None:
        import torch

        if not isinstance(keys, torch.Tensor) or keys.dtype != torch.int64 or keys.ndim != 1 or keys.numel() == 0:
            raise TypeError("keys must be a non-empty 1-D int64 tensor (one key per row, e.g. from CounterRows.keyed), "
                            f"got {type(keys).__name__} {getattr(keys, 'dtype', '')} {tuple(getattr(keys, 'shape', ()))}")
        self.keys = keys
        self.position = check_int(position, "position", minimum=0)

    @classmethod
    def keyed(cls, run_seed: int, server_round: int, client_ids: Sequence[int] | np.ndarray, purpose: str,
              device: str | torch.device = "cpu") -> CounterRows:
        """Row i keyed by ``(run_seed, server_round, client_ids[i], purpose)``, its key on ``device``."""
        import torch

        run_seed = check_int(run_seed, "run_seed", minimum=0)
        server_round = check_int(server_round, "server_round", minimum=0)
        if isinstance(client_ids, np.ndarray):
            ids = client_ids
        else:  # a short list (one client on the single-client path): exact ints up to 2^64 − 1, never via float
            ids = np.array([check_int(c, "client_ids", minimum=0, maximum=_U64) for c in client_ids], dtype=np.uint64)
        if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu" or (ids.dtype.kind == "i" and ids.min() < 0):
            raise ValueError(f"client_ids must be a non-empty sequence of integers >= 0, got {client_ids!r:.80}")
        h = 0
        for shift in range(0, max(run_seed.bit_length(), 1), 64):  # every 64-bit limb of the seed
            h = _absorb(h, run_seed >> shift)
        h = _absorb(_absorb(h, server_round), purpose_id(purpose))
        words = torch.from_numpy(ids.astype(np.uint64).view(np.int64)).to(device)
        keys = words.bitwise_xor(_as_int64(h + _GAMMA))  # _absorb of each client's word, all rows at once
        return cls(_mix_(keys, torch.empty_like(keys)))

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def __repr__(self) -> str:
        return f"CounterRows(<{len(self)} rows> at {self.position}, {self.keys.device})"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"CounterRows has no attribute {name!r}: only random, standard_normal, laplace, uniform, "
                             "normal, laplace_tensor and generators draw")

    def rows(self, start: int, stop: int) -> CounterRows:
        """Rows ``start:stop`` at the current position (a block of the batch draws the same bits)."""
        return CounterRows(self.keys[start:stop], self.position)

    def generators(self) -> tuple[np.random.Generator, ...]:
        """One numpy Generator per row (Philox keyed by the row's key and the position), for code that draws
        row by row; a row's Generator is the same alone or in a batch."""
        keys = self.keys.cpu().numpy().view(np.uint64)
        return tuple(np.random.Generator(np.random.Philox(key=[int(k), self.position])) for k in keys)

    def _fill(self, words: int, values: int, dtype: torch.dtype, make: Any) -> torch.Tensor:
        """(N, values) of ``make(z, scratch, out)`` over blocks of rows, z the rows' next ``words`` outputs."""
        import torch

        counters = torch.arange(self.position + 1, self.position + words + 1, dtype=torch.int64,
                                device=self.keys.device).mul_(_as_int64(_GAMMA))
        out = torch.empty((len(self), values), dtype=dtype, device=self.keys.device)
        step = max(1, _WORD_BLOCK // max(words, 1))
        for start in range(0, len(self), step):  # blocks of rows: a vectorized call each, temporaries in cache
            stop = min(start + step, len(self))
            z = torch.add(counters, self.keys[start:stop, None])
            scratch = torch.empty_like(z)
            make(_mix_(z, scratch), scratch, out[start:stop])
        self.position += words
        return out

    def uniform(self, n: int) -> torch.Tensor:
        """Uniform [0, 1) float64 (N, n), 53 bits each: :meth:`uniform_bits` times 2⁻⁵³."""
        import torch

        def make(z: torch.Tensor, scratch: torch.Tensor, out: torch.Tensor) -> None:
            out.copy_(_shift_right(z, 11, scratch)).mul_(2.0**-53)

        return self._fill(n, n, torch.float64, make)

    def uniform_bits(self, n: int) -> torch.Tensor:
        """The 53-bit integers k (int64 (N, n)) whose k·2⁻⁵³ are :meth:`uniform`'s values: the same order, no float pass."""
        import torch

        def make(z: torch.Tensor, scratch: torch.Tensor, out: torch.Tensor) -> None:
            _shift_right(z, 11, out)

        return self._fill(n, n, torch.int64, make)

    def normal(self, n: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Standard normal (N, n) in ``dtype`` (float64 by default): one output per Box–Muller pair.

        The radius takes the top 40 bits, the angle the low 24; a float32 draw is the float64 draw
        rounded (evaluated in float32), so the two precisions agree to float32 rounding.
        """
        import torch

        pairs = (n + 1) // 2
        work = torch.float32 if _is_single(dtype) else torch.float64

        def make(z: torch.Tensor, scratch: torch.Tensor, out: torch.Tensor) -> None:
            radius = _shift_right(z, 24, scratch).to(work)
            angle = z.bitwise_and_((1 << 24) - 1).to(work).mul_(2.0 * math.pi * 2.0**-24)
            # r = √(−2 ln u), u = (k + ½)·2^−40  →  r² = 80 ln 2 − 2 ln(k + ½)
            radius = radius.add_(0.5).log_().mul_(-2.0).add_(80.0 * math.log(2.0)).sqrt_()
            torch.mul(torch.cos(angle), radius, out=out[:, :pairs])
            torch.mul(angle[:, :n - pairs].sin_(), radius[:, :n - pairs], out=out[:, pairs:])

        return self._fill(pairs, n, dtype or torch.float64, make)

    def laplace_tensor(self, n: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Standard Laplace (scale 1) (N, n) in ``dtype``: the sign bit times −ln of a 52-bit uniform in (0, 1)."""
        import torch

        work = torch.float32 if _is_single(dtype) else torch.float64

        def make(z: torch.Tensor, scratch: torch.Tensor, out: torch.Tensor) -> None:
            magnitude = _shift_right(z, 11, scratch).bitwise_and_((1 << 52) - 1).to(work)
            value = magnitude.add_(0.5).log_().sub_(52.0 * math.log(2.0))  # ln u ≤ 0
            out.copy_(torch.where(z < 0, value, -value))

        return self._fill(n, n, dtype or torch.float64, make)

    def _shape(self, size: Any) -> tuple[tuple[int, ...], int]:
        """The shape of a numpy-style draw (leading axis N) and its values per row."""
        return row_shape(size, len(self), "the number of rows")

    def random(self, size: Any) -> np.ndarray:
        """Uniform [0, 1) float64 array of shape ``size`` (leading axis N), like :meth:`RowStreams.random`."""
        shape, per_row = self._shape(size)
        return self.uniform(per_row).cpu().numpy().reshape(shape)

    def standard_normal(self, size: Any = None) -> np.ndarray:
        """Standard normal float64 array of shape ``size`` (leading axis N)."""
        shape, per_row = self._shape(size)
        return self.normal(per_row).cpu().numpy().reshape(shape)

    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> np.ndarray:
        """Laplace(loc, scale) float64 array of shape ``size`` (leading axis N); ``loc``, ``scale`` broadcast."""
        shape, per_row = self._shape(size)
        return loc + scale * self.laplace_tensor(per_row).cpu().numpy().reshape(shape)


#: What a batch of rows draws from: one stream per row, or keyed counter-based rows.
RowDraws: TypeAlias = RowStreams | CounterRows

#: What a privatizing draw may come from: one keyed Generator, one stream per row, rows of one stream,
#: or keyed counter-based rows.
Draws: TypeAlias = np.random.Generator | RowStreams | StreamRows | CounterRows


def check_draws(rng: Any, name: str = "rng") -> Draws:
    """Return ``rng`` after checking it is a numpy ``Generator``, a :class:`RowStreams`, :class:`StreamRows` or
    :class:`CounterRows`."""
    if not isinstance(rng, (np.random.Generator, RowStreams, StreamRows, CounterRows)):
        raise TypeError(f"{name} must be a numpy.random.Generator (e.g. fedpriv.rng.stream(...)) or a "
                        f"fedpriv.rng.RowStreams (or StreamRows, CounterRows), got {type(rng).__name__}")
    return rng
