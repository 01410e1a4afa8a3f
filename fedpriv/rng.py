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
so the words of a row are reached by moving the counter).

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
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from fedpriv._validation import check_int

if TYPE_CHECKING:  # torch is imported where a torch stream is made, so numpy-only users never load it
    import torch

__all__ = [
    "Draws",
    "KeyedRNG",
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


#: Words (64-bit outputs) of the stream a laplace or standard_normal replay draws at a time.
_REPLAY_PIECE = 1 << 20


class StreamRows:
    """Rows ``start:stop`` of the draws a batch of ``rows`` rows takes, call after call, from one Philox stream.

    Code that privatizes a batch draws ``g.random((rows, *s))`` (and further such calls) from one
    stream ``g``: row i of each call is a fixed run of the stream's 64-bit words. A StreamRows
    answers the same calls for the rows ``start:stop`` only (a draw of shape ``(stop - start, *s)``)
    with exactly those bits, and keeps the stream's position as if the whole batch had drawn:

    * ``random`` takes one word per float, so the rows' words are reached by moving Philox's
      counter (no other row is drawn);
    * ``laplace`` and ``standard_normal`` take a variable number of words per value (numpy redraws a
      Laplace uniform of exactly 0; the ziggurat rejects), so the rows before ``start`` are drawn
      and dropped (in pieces of bounded memory), and the rows after ``stop`` only when a later
      call needs the position.

    Build it with :meth:`of` from a Generator positioned where the batch starts drawing; :meth:`then`
    gives the view of a following batch of the same stream.

    Examples
    --------
    >>> from fedpriv.rng import StreamRows, stream
    >>> batch = stream(7, 1, 0, "noise").random((5, 3))
    >>> rows = StreamRows.of(stream(7, 1, 0, "noise"), rows=5, start=2, stop=3).random((1, 3))
    >>> bool((rows == batch[2:3]).all())
    True
    """

    __slots__ = ("_key", "_position", "_pending", "rows", "start", "stop")

    def __init__(self, key: np.ndarray, position: int, rows: int, start: int, stop: int) -> None:
        self._key = np.array(key, dtype=np.uint64)
        if self._key.shape != (2,):
            raise ValueError(f"key must be Philox's key of 2 uint64 words, got shape {self._key.shape}")
        self._position = check_int(position, "position", minimum=0)
        self.rows = check_int(rows, "rows", minimum=1)
        self.start = check_int(start, "start", minimum=0, maximum=self.rows - 1)
        self.stop = check_int(stop, "stop", minimum=self.start + 1, maximum=self.rows)
        self._pending: tuple[np.random.Generator, int, Any] | None = None

    @classmethod
    def of(cls, generator: np.random.Generator, rows: int, start: int, stop: int) -> StreamRows:
        """Rows ``start:stop`` of a batch of ``rows`` rows that draws from ``generator`` (Philox) from now on."""
        if not isinstance(generator, np.random.Generator) or not isinstance(generator.bit_generator,
                                                                           np.random.Philox):
            raise TypeError("generator must be a numpy.random.Generator over Philox (e.g. fedpriv.rng.stream(...)), "
                            f"got {type(generator).__name__}")
        state = generator.bit_generator.state
        return cls(state["state"]["key"], _words_drawn(state), rows, start, stop)

    def then(self, rows: int, start: int, stop: int) -> StreamRows:
        """The rows ``start:stop`` of the next batch of ``rows`` rows drawing from the same stream."""
        return StreamRows(self._key, self.position, rows, start, stop)

    @property
    def position(self) -> int:
        """Words of the stream the whole batch has drawn so far (drawing what a replay left pending)."""
        if self._pending is not None:
            generator, values, draw = self._pending
            _drop(generator, values, draw)
            self._position, self._pending = _words_drawn(generator.bit_generator.state), None
        return self._position

    def __len__(self) -> int:
        return self.stop - self.start

    def __repr__(self) -> str:
        return f"StreamRows(rows {self.start}:{self.stop} of {self.rows})"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"StreamRows has no attribute {name!r}: only random, standard_normal and laplace draw "
                             "rows of a batch")

    def _at(self, position: int) -> np.random.Generator:
        """A generator of this stream whose next word is word ``position``."""
        philox = np.random.Philox(key=self._key)
        philox.advance(position // 4)  # Philox makes 4 words per counter step
        generator = np.random.Generator(philox)
        if position % 4:
            generator.random(position % 4)
        return generator

    def _shape(self, size: Any) -> tuple[tuple[int, ...], int]:
        """The served shape (leading axis ``stop - start``) and the values per row."""
        try:
            shape = (operator.index(size),) if not isinstance(size, (tuple, list)) else tuple(map(operator.index, size))
        except TypeError as exc:
            raise TypeError(f"size must be an int or a tuple of ints, got {size!r}") from exc
        if not shape or shape[0] != len(self):
            raise ValueError(f"size must have first entry equal to the number of rows served {len(self)}, got {shape}")
        return shape, int(np.prod(shape[1:], dtype=np.int64))

    def random(self, size: Any) -> np.ndarray:
        """Uniform [0, 1) floats: rows ``start:stop`` of ``g.random((rows, *size[1:]))``."""
        shape, per_row = self._shape(size)
        origin = self.position
        out = self._at(origin + self.start * per_row).random(shape)
        self._position = origin + self.rows * per_row
        return out

    def _replay(self, shape: tuple[int, ...], per_row: int, draw: Any) -> np.ndarray:
        """Rows ``start:stop`` of a variable-length draw: the rows before drawn and dropped, the rows after later."""
        generator = self._at(self.position)
        _drop(generator, self.start * per_row, draw)
        out = draw(generator, shape)
        self._pending = (generator, (self.rows - self.stop) * per_row, draw)
        return out

    def standard_normal(self, size: Any = None) -> np.ndarray:
        """Standard normal floats: rows ``start:stop`` of ``g.standard_normal((rows, *size[1:]))``."""
        shape, per_row = self._shape(size)
        return self._replay(shape, per_row, lambda g, s: g.standard_normal(s))

    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> np.ndarray:
        """Laplace(loc, scale) floats: rows ``start:stop`` of ``g.laplace(loc, scale, (rows, *size[1:]))`` (scalar
        ``loc`` and ``scale``, as the mechanisms draw: they scale the standard draw themselves)."""
        if np.ndim(loc) != 0 or np.ndim(scale) != 0:
            raise TypeError(f"StreamRows.laplace takes a scalar loc and scale, got shapes {np.shape(loc)} and "
                            f"{np.shape(scale)}")
        shape, per_row = self._shape(size)
        return self._replay(shape, per_row, lambda g, s: g.laplace(loc, scale, s))


def _words_drawn(state: Mapping[str, Any]) -> int:
    """Words a Philox stream in ``state`` has handed out since its counter was 0."""
    counter = sum(int(w) << (64 * i) for i, w in enumerate(state["state"]["counter"]))
    return 0 if counter == 0 else 4 * (counter - 1) + int(state["buffer_pos"])


def _drop(generator: np.random.Generator, values: int, draw: Any) -> None:
    """Draw ``values`` values with ``draw(generator, shape)`` in pieces of bounded memory and drop them."""
    while values > 0:
        piece = min(values, _REPLAY_PIECE)
        draw(generator, (piece,))
        values -= piece


#: What a privatizing draw may come from: one keyed Generator, one stream per row, or rows of one stream.
Draws: TypeAlias = np.random.Generator | RowStreams | StreamRows


def check_draws(rng: Any, name: str = "rng") -> Draws:
    """Return ``rng`` after checking it is a numpy ``Generator``, a :class:`RowStreams` or a :class:`StreamRows`."""
    if not isinstance(rng, (np.random.Generator, RowStreams, StreamRows)):
        raise TypeError(f"{name} must be a numpy.random.Generator (e.g. fedpriv.rng.stream(...)) or a "
                        f"fedpriv.rng.RowStreams (or StreamRows), got {type(rng).__name__}")
    return rng
