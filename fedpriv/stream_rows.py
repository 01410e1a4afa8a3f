"""Rows of a batch's draws from one keyed stream, replayed for those rows alone (docs/design.md §4).

A batch that privatizes its rows draws them all from *one* Philox stream; :class:`StreamRows` lets
one client reproduce its own rows of those draws without drawing the others' (Philox is
counter-based, so the words of a row are reached by moving the counter). Imported from
:mod:`fedpriv.rng`, with the keyed streams it replays.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv._validation import check_int

__all__ = ["StreamRows", "row_shape"]

#: Words (64-bit outputs) of the stream a laplace or standard_normal replay draws at a time.
_REPLAY_PIECE = 1 << 20


def row_shape(size: Any, rows: int, what: str) -> tuple[tuple[int, ...], int]:
    """``size`` as a numpy-style shape whose leading axis is ``rows`` (``what`` names them), and its values per row."""
    try:
        shape = (operator.index(size),) if not isinstance(size, (tuple, list)) else tuple(map(operator.index, size))
    except TypeError as exc:
        raise TypeError(f"size must be an int or a tuple of ints, got {size!r}") from exc
    if not shape or shape[0] != rows:
        raise ValueError(f"size must have first entry equal to {what} {rows}, got {shape}")
    return shape, int(np.prod(shape[1:], dtype=np.int64))


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
        return row_shape(size, len(self), "the number of rows served")

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


# SplitMix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators"): output c of
# the stream with seed k is mix(k + (c + 1)·GAMMA) mod 2^64. Held as int64 (two's complement): torch
