"""Explicit-feedback rating data: the :class:`Ratings` container, file readers, a synthetic generator.

Guarantee (docs/federated_mf.md §1.1, §8.1): every :class:`Ratings` holds dense user/item indices in
``[0, n_users)`` / ``[0, n_items)``, finite ratings inside the declared range ``[r_min, r_max]``
with ``0 ≤ r_min < r_max = R`` (the embedding-clipping sensitivity bound of §3.1 needs ratings in
``[0, R]``), and at most one rating per (user, item) cell. Readers never clip, round or drop a
rating: a malformed line, an out-of-range rating or a duplicated cell raises
``ValueError("<path>:<line>: <reason>")`` naming the first bad line.

Readers (:func:`read_ratings`, ``format="auto"`` picks by file name, then by content):

* ``movielens-tab`` — MovieLens-100k ``u.data``: ``user<TAB>item<TAB>rating<TAB>timestamp``;
* ``movielens-dat`` — MovieLens-1M/10M ``ratings.dat``: ``user::item::rating::timestamp``;
* ``movielens-csv`` — MovieLens-20M/25M ``ratings.csv`` with header ``userId,movieId,rating,timestamp``;
* ``recbole`` — RecBole atomic ``.inter`` files (tab, typed header such as ``user_id:token``;
  columns found by name; ids may be non-numeric tokens);
* ``libimseti`` — LibimSeTi ``ratings.dat``: ``user,profile,rating`` (no header).

Declared ranges (overridable with ``r_min`` / ``r_max``): MovieLens and RecBole ``[0.5, 5]``
(R = 5, §1.1), LibimSeTi ``[1, 10]`` (R = 10, §9 A24: all ratings kept, Shin et al.'s filtering
is not applied). Users and items are re-indexed densely over the ids that occur in the file, in
increasing raw-id order (§9 A22); the raw ids are kept in ``user_ids`` / ``item_ids``.

Genres (§8.2, §9 A23) are read when a companion file sits next to the ratings: ``u.item`` (19
pipe-separated flags), ``movies.dat`` (``id::title::A|B``), ``movies.csv`` or the RecBole ``.item``
file (``class:token_seq``). Tags that are not genres (``(no genres listed)``, ``IMAX``,
``unknown``) are dropped, and MovieLens-100k's ``Children's`` is named ``Children`` as in the
later MovieLens releases, so every release has the same 18 genres.

:func:`synthetic_ratings` draws a low-rank non-negative ground truth plus Gaussian noise (§8.1)
from the keyed stream ``fedpriv.rng.stream(seed, 0, SERVER, "mf-synthetic")``.
"""

from __future__ import annotations

import csv
import io
import math
import os
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv._validation import (
    check_choice,
    check_int,
    check_positive,
    check_probability,
)
from fedpriv.data.files import open_user_file, read_user_bytes, read_user_text
from fedpriv.rng import SERVER, stream

__all__ = [
    "FORMATS",
    "FORMAT_RANGES",
    "NOT_GENRES",
    "Ratings",
    "detect_format",
    "read_ratings",
    "synthetic_ratings",
]

#: Known reader formats (``auto`` detects one of the others).
FORMATS: tuple[str, ...] = ("auto", "movielens-tab", "movielens-dat", "movielens-csv", "recbole", "libimseti")
#: Declared rating range per format (§1.1, §8.1): MovieLens 0.5…5 (R = 5), LibimSeTi 1…10 (R = 10).
FORMAT_RANGES: dict[str, tuple[float, float]] = {
    "movielens-tab": (0.5, 5.0),
    "movielens-dat": (0.5, 5.0),
    "movielens-csv": (0.5, 5.0),
    "recbole": (0.5, 5.0),
    "libimseti": (1.0, 10.0),
}
#: Tags of the MovieLens genre lists that are not one of the 18 genres (§9 A23).
NOT_GENRES: frozenset[str] = frozenset({"(no genres listed)", "IMAX", "unknown"})
#: Genre names renamed so that every MovieLens release uses the same 18 names.
_GENRE_ALIASES: dict[str, str] = {"Children's": "Children"}
#: The 19 genre flags of MovieLens-100k ``u.item``, in file order.
_ML100K_FLAGS: tuple[str, ...] = (
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western",
)


# ---------------------------------------------------------------------------------------------
# the container
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Ratings:
    """Observed ratings of an n × m matrix (docs/federated_mf.md §1.1), one entry per observed cell.

    Attributes
    ----------
    users : ndarray of int64, shape (N,)
        Dense user indices in ``[0, n_users)``.
    items : ndarray of int64, shape (N,)
        Dense item indices in ``[0, n_items)``.
    values : ndarray of float64, shape (N,)
        Ratings in ``[r_min, r_max]``.
    n_users, n_items : int
        Sizes of the index spaces (a subset made by :meth:`select` keeps them).
    r_min, r_max : float
        Declared rating range; ``r_max`` is R of the spec, ``0 ≤ r_min < r_max``.
    item_genres : tuple of tuple of str, or None
        Genres per dense item index, when known.
    name : str
    user_ids, item_ids : ndarray or None
        Raw ids of the dense indices (``user_ids[u]`` is the file's id of user ``u``), when read
        from a file.

    The arrays are made read-only; instances compare by identity.
    """

    users: np.ndarray
    items: np.ndarray
    values: np.ndarray
    n_users: int
    n_items: int
    r_min: float
    r_max: float
    item_genres: tuple[tuple[str, ...], ...] | None = None
    name: str = ""
    user_ids: np.ndarray | None = None
    item_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        n_users = check_int(self.n_users, "n_users", minimum=1)
        n_items = check_int(self.n_items, "n_items", minimum=1)
        r_min = _finite(self.r_min, "r_min")
        r_max = _finite(self.r_max, "r_max")
        if not 0.0 <= r_min < r_max:
            raise ValueError(f"the declared rating range must satisfy 0 <= r_min < r_max (ratings in [0, R], "
                             f"docs/federated_mf.md §1.1), got r_min={self.r_min!r}, r_max={self.r_max!r}")
        users = _index_array(self.users, "users", n_users)
        items = _index_array(self.items, "items", n_items)
        values = np.asarray(self.values, dtype=np.float64)
        if values.ndim != 1 or not (values.shape == users.shape == items.shape):
            raise ValueError(f"users, items and values must be 1-D arrays of one length, got shapes "
                             f"{users.shape}, {items.shape}, {np.shape(self.values)}")
        bad = ~np.isfinite(values) | (values < r_min) | (values > r_max)
        if bad.any():
            raise ValueError(f"values must lie in the declared range [{r_min:g}, {r_max:g}] (nothing is clipped), "
                             f"got {values[bad][0]!r} at position {int(np.flatnonzero(bad)[0])}")
        if users.size:
            cells = users * n_items + items
            if np.unique(cells).size != cells.size:
                raise ValueError("ratings must hold at most one rating per (user, item) cell, got duplicates")
        if self.item_genres is not None:
            genres = tuple(tuple(g) for g in self.item_genres)
            if len(genres) != n_items:
                raise ValueError(f"item_genres must have one entry per item ({n_items}), got {len(genres)}")
            object.__setattr__(self, "item_genres", genres)
        for name, n in (("user_ids", n_users), ("item_ids", n_items)):
            ids = getattr(self, name)
            if ids is not None:
                ids = np.array(ids)
                if ids.shape != (n,):
                    raise ValueError(f"{name} must have shape ({n},) (one raw id per index), got {ids.shape}")
                ids.setflags(write=False)
                object.__setattr__(self, name, ids)
        _freeze(self, users=users, items=items, values=values, n_users=n_users, n_items=n_items,
                r_min=r_min, r_max=r_max)

    @classmethod
    def _trusted(cls, **kw: Any) -> Ratings:
        """Build without re-checking (fields come from an already checked instance)."""
        obj = object.__new__(cls)
        defaults = {f.name: f.default for f in fields(cls)}
        for name, value in {**defaults, **kw}.items():
            if isinstance(value, np.ndarray) and value.flags.writeable:
                value.setflags(write=False)
            object.__setattr__(obj, name, value)
        return obj

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def __repr__(self) -> str:
        return (f"Ratings(name={self.name!r}, n_users={self.n_users}, n_items={self.n_items}, "
                f"ratings={len(self)}, range=[{self.r_min:g}, {self.r_max:g}])")

    def select(self, mask_or_index: Any) -> Ratings:
        """The subset given by a boolean mask (N,) or an integer index array; index spaces unchanged."""
        sel = np.asarray(mask_or_index)
        if sel.dtype == bool:
            if sel.shape != (len(self),):
                raise ValueError(f"mask_or_index as a mask must have shape ({len(self)},), got {sel.shape}")
            sel = np.flatnonzero(sel)
        elif sel.size == 0:
            sel = np.zeros(0, dtype=np.int64)
        elif not np.issubdtype(sel.dtype, np.integer) or sel.ndim != 1:
            raise TypeError(f"mask_or_index must be a boolean mask or a 1-D integer index array, "
                            f"got dtype {sel.dtype} with shape {sel.shape}")
        elif sel.min() < -len(self) or sel.max() >= len(self):
            raise ValueError(f"mask_or_index must index the {len(self)} ratings, got indices in "
                             f"[{sel.min()}, {sel.max()}]")
        elif np.unique(sel).size != sel.size:
            raise ValueError("mask_or_index must not repeat a rating (one rating per cell), got repeated indices")
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        kw.update(users=self.users[sel], items=self.items[sel], values=self.values[sel])
        return Ratings._trusted(**kw)

    def user_counts(self) -> np.ndarray:
        """Ratings per user, shape (n_users,)."""
        return np.bincount(self.users, minlength=self.n_users)

    def item_counts(self) -> np.ndarray:
        """Ratings per item, shape (n_items,)."""
        return np.bincount(self.items, minlength=self.n_items)

    @property
    def density(self) -> float:
        """Fraction of observed cells, |Ω| / (n m)."""
        return len(self) / (self.n_users * self.n_items)

    def genres(self) -> tuple[str, ...]:
        """The distinct genres of the items, sorted by name (empty when genres are unknown)."""
        if self.item_genres is None:
            return ()
        return tuple(sorted({g for gs in self.item_genres for g in gs}))

    def summary(self) -> dict[str, Any]:
        """Sizes, declared and observed range, density: what ``fedpriv datasets info`` prints."""
        return {
            "name": self.name,
            "n_users": self.n_users,
            "n_items": self.n_items,
            "n_ratings": len(self),
            "r_min": self.r_min,
            "r_max": self.r_max,
            "observed_min": float(self.values.min()) if len(self) else None,
            "observed_max": float(self.values.max()) if len(self) else None,
            "mean": float(self.values.mean()) if len(self) else None,
            "density": self.density,
            "genres": len(self.genres()),
        }


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def _index_array(x: Any, name: str, n: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D index array, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"{name} must lie in [0, {n}), got values in [{arr.min()}, {arr.max()}]")
    return arr


def _freeze(obj: Ratings, **values: Any) -> None:
    for name, value in values.items():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
        object.__setattr__(obj, name, value)


# ---------------------------------------------------------------------------------------------
# readers
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Layout:
    """How one format lays out a line: separator, header, and which fields hold user/item/rating."""

    sep: str
    header: bool
    n_fields: int | None          # fixed field count (None: the header's)
    columns: tuple[int, int, int] | None  # user, item, rating field (None: found in the header)
    names: tuple[str, str, str] = ("", "", "")  # header names of user, item, rating


_LAYOUTS: dict[str, _Layout] = {
    "movielens-tab": _Layout("\t", False, 4, (0, 1, 2)),
    "movielens-dat": _Layout("::", False, 4, (0, 1, 2)),
    "movielens-csv": _Layout(",", True, None, None, ("userId", "movieId", "rating")),
    "recbole": _Layout("\t", True, None, None, ("user_id", "item_id", "rating")),
    "libimseti": _Layout(",", False, 3, (0, 1, 2)),
}


def detect_format(path: str | os.PathLike[str]) -> str:
    """The reader format of a ratings file, from its name and else its first line."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith(".inter"):
        return "recbole"
    if name == "u.data" or name.endswith(".data"):
        return "movielens-tab"
    first = _first_line(p)
    if name.endswith(".csv"):
        return "movielens-csv"
    if "::" in first:
        return "movielens-dat"
    if "\t" in first:
        return "recbole" if ":token" in first or ":float" in first else "movielens-tab"
    if first.count(",") == 2 and "userid" not in first.lower():
        return "libimseti"
    if "userid" in first.lower():
        return "movielens-csv"
    raise ValueError(f"format of {str(path)!r} could not be detected from its name or first line {first[:80]!r}; "
                     f"pass format= one of {', '.join(map(repr, FORMATS[1:]))}")


#: What a ratings file must be, for the errors of :mod:`fedpriv.data.files`.
_RATINGS_FILE = "a ratings file (MovieLens u.data / ratings.dat / ratings.csv, RecBole .inter or LibimSeTi CSV)"


def _first_line(path: Path) -> str:
    with open_user_file(path, _RATINGS_FILE) as fh:
        for raw in fh:
            line = raw.decode("utf-8", errors="replace").strip("\r\n")
            if line:
                return line
    raise ValueError(f"{path}: the ratings file is empty (no ratings)")


def read_ratings(
    path: str | os.PathLike[str],
    *,
    format: str = "auto",
    r_min: float | None = None,
    r_max: float | None = None,
) -> Ratings:
    """Read a ratings file (MovieLens, RecBole ``.inter``, LibimSeTi) into dense :class:`Ratings`."""
    check_choice(format, "format", FORMATS)
    p = Path(path)
    fmt = detect_format(p) if format == "auto" else format
    lo_default, hi_default = FORMAT_RANGES[fmt]
    lo = lo_default if r_min is None else _finite(r_min, "r_min")
    hi = hi_default if r_max is None else _finite(r_max, "r_max")
    if not 0.0 <= lo < hi:
        raise ValueError(f"the declared rating range must satisfy 0 <= r_min < r_max (docs/federated_mf.md §1.1), "
                         f"got r_min={lo!r}, r_max={hi!r}")
    layout = _LAYOUTS[fmt]
    data = read_user_bytes(p, _RATINGS_FILE)
    users_raw, items_raw, values, rows = _parse(p, data, layout)
    # §8.1: ratings inside the declared range, never clipped
    bad = ~np.isfinite(values) | (values < lo) | (values > hi)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{p}:{rows(k)}: rating {values[k]:g} lies outside the declared range [{lo:g}, {hi:g}] "
                         f"(nothing is clipped; pass r_min/r_max to declare another range)")
    user_ids, users = np.unique(users_raw, return_inverse=True)   # §9 A22: ids that occur, dense
    item_ids, items = np.unique(items_raw, return_inverse=True)
    cells = users.astype(np.int64) * item_ids.size + items
    order = np.argsort(cells, kind="stable")
    dup = np.flatnonzero(cells[order][1:] == cells[order][:-1])
    if dup.size:
        first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise ValueError(f"{p}:{rows(second)}: duplicate rating of user {users_raw[second].item()!r} for item "
                         f"{items_raw[second].item()!r} (first given on line {rows(first)}); one rating per cell")
    genres = _read_genres(p, fmt, item_ids)
    # every field checked above (dense indices, range, one rating per cell): skip the re-check
    return Ratings._trusted(users=users.astype(np.int64), items=items.astype(np.int64), values=values,
                            n_users=int(user_ids.size), n_items=int(item_ids.size), r_min=lo, r_max=hi,
                            item_genres=genres, name=f"{p.name} ({fmt})", user_ids=user_ids, item_ids=item_ids)


def _parse(path: Path, data: bytes, layout: _Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """(raw users, raw items, ratings, row → line number) of one file; raises naming the first bad line."""
    if not data.strip():
        raise ValueError(f"{path}: the ratings file is empty (no ratings)")
    body, first_line = data, 1
    cols, n_fields = layout.columns or (0, 1, 2), layout.n_fields or 0
    if layout.header:
        end = data.find(b"\n")
        head = (data if end < 0 else data[:end]).decode("utf-8", errors="replace").strip("\r\n\ufeff")
        body, first_line = (b"" if end < 0 else data[end + 1:]), 2
        names = [f.split(":")[0].strip() for f in head.split(layout.sep)]
        missing = [n for n in layout.names if n not in names]
        if missing:
            raise ValueError(f"{path}:1: header {head[:120]!r} lacks column(s) {', '.join(missing)} "
                             f"(expected {', '.join(layout.names)})")
        user, item, rating = (names.index(n) for n in layout.names)
        cols = (user, item, rating)
        n_fields = len(names)
    if not body.strip():
        raise ValueError(f"{path}: the ratings file holds no ratings")

    def rows(k: int) -> int:
        return _line_numbers(body, first_line)[k]

    sep = layout.sep
    parsed = None
    if sep != "::" or data.count(b":") == 2 * data.count(b"::"):
        try:
            table = np.loadtxt(io.BytesIO(body.replace(b"::", b":") if sep == "::" else body),
                               delimiter=":" if sep == "::" else sep, comments=None, dtype=np.float64, ndmin=2)
            parsed = table[:, cols[0]], table[:, cols[1]], np.ascontiguousarray(table[:, cols[2]])
        except ValueError:
            parsed = None
    tokens = layout is _LAYOUTS["recbole"]
    if parsed is None:
        line_no, reason = _diagnose(body, first_line, sep, n_fields, cols, token_ids=tokens)
        if line_no is None:  # only token ids were non-numeric (RecBole): keep them as strings
            with warnings.catch_warnings():  # numpy's note that blank lines are not counted as rows
                warnings.simplefilter("ignore", UserWarning)
                table = np.loadtxt(io.BytesIO(body), delimiter=sep, comments=None, dtype=str, ndmin=2)
            return table[:, cols[0]], table[:, cols[1]], table[:, cols[2]].astype(np.float64), rows
        raise ValueError(f"{path}:{line_no}: {reason}")
    users_raw, items_raw, values = parsed
    for what, ids in (("user", users_raw), ("item", items_raw)):
        frac = ids != np.floor(ids)
        if frac.any():
            k = int(np.flatnonzero(frac)[0])
            raise ValueError(f"{path}:{rows(k)}: {what} id {ids[k]:g} is not an integer")
    return users_raw.astype(np.int64), items_raw.astype(np.int64), values, rows


def _line_numbers(body: bytes, first_line: int) -> np.ndarray:
    """File line numbers of the non-empty lines of ``body`` (which starts on line ``first_line``)."""
    buf = np.frombuffer(body, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [buf.size]))
    lengths = ends - starts
    cr = np.zeros(lengths.size, dtype=bool)
    cr[lengths > 0] = buf[ends[lengths > 0] - 1] == 13
    nonblank = (lengths - cr) > 0
    return np.flatnonzero(nonblank) + first_line


def _diagnose(body: bytes, first_line: int, sep: str, n_fields: int, cols: tuple[int, int, int], *,
              token_ids: bool) -> tuple[int | None, str]:
    """The first malformed line and why (error path only); ``(None, "")`` when every line is fine."""
    for offset, raw in enumerate(body.decode("utf-8", errors="replace").split("\n")):
        line = raw.rstrip("\r")
        if not line:
            continue
        parts = line.split(sep)
        if len(parts) != n_fields:
            return first_line + offset, (f"expected {n_fields} fields separated by {sep!r}, got {len(parts)} "
                                         f"in {line[:80]!r}")
        for col, what in zip(cols, ("user id", "item id", "rating"), strict=True):
            if token_ids and what != "rating":
                if not parts[col].strip():
                    return first_line + offset, f"{what} is empty in {line[:80]!r}"
                continue
            try:
                float(parts[col])
            except ValueError:
                return first_line + offset, f"{what} {parts[col]!r} is not a number"
    return None, ""


def _clean_genres(tags: Any) -> tuple[str, ...]:
    """Genre tags without the non-genres of §9 A23, renamed to the 18 common names, sorted, unique."""
    out = {_GENRE_ALIASES.get(t, t) for t in (s.strip() for s in tags) if t and t not in NOT_GENRES}
    return tuple(sorted(out))


def _read_genres(path: Path, fmt: str, item_ids: np.ndarray) -> tuple[tuple[str, ...], ...] | None:
    """Genres per dense item from the companion file next to the ratings, or ``None`` when absent."""
    companion = {
        "movielens-tab": path.with_name("u.item"),
        "movielens-dat": path.with_name("movies.dat"),
        "movielens-csv": path.with_name("movies.csv"),
        "recbole": path.with_suffix(".item"),
    }.get(fmt)
    if companion is None or not companion.exists():  # optional; a directory of that name is reported
        return None
    text = read_user_text(companion, f"the genre file of {path.name} ({fmt})",
                          encoding="utf-8" if fmt == "movielens-csv" else "latin-1")
    by_id: dict[str, tuple[str, ...]] = {}
    if fmt == "movielens-csv":
        reader = csv.reader(io.StringIO(text))
        header = next(reader, [])
        if "movieId" not in header or "genres" not in header:
            raise ValueError(f"{companion}:1: header must name movieId and genres, got {header!r}")
        i_id, i_g = header.index("movieId"), header.index("genres")
        for line_no, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise ValueError(f"{companion}:{line_no}: expected {len(header)} fields, got {len(row)}")
            by_id[row[i_id].strip()] = _clean_genres(row[i_g].split("|"))
    else:
        lines = text.split("\n")
        sep = {"movielens-tab": "|", "movielens-dat": "::", "recbole": "\t"}[fmt]
        start, i_id, i_g = 0, 0, 2
        if fmt == "recbole":
            names = [f.split(":")[0].strip() for f in lines[0].strip("\r\ufeff").split(sep)]
            if "item_id" not in names or "class" not in names:
                raise ValueError(f"{companion}:1: header must name item_id and class, got {lines[0][:120]!r}")
            start, i_id, i_g = 1, names.index("item_id"), names.index("class")
        for line_no, raw in enumerate(lines[start:], start=start + 1):
            line = raw.rstrip("\r")
            if not line:
                continue
            parts = line.split(sep)
            if fmt == "movielens-tab":
                if len(parts) != 5 + len(_ML100K_FLAGS):
                    raise ValueError(f"{companion}:{line_no}: expected {5 + len(_ML100K_FLAGS)} '|'-separated "
                                     f"fields, got {len(parts)}")
                tags = [g for g, flag in zip(_ML100K_FLAGS, parts[5:], strict=True) if flag.strip() == "1"]
            else:
                if len(parts) <= max(i_id, i_g):
                    raise ValueError(f"{companion}:{line_no}: expected at least {max(i_id, i_g) + 1} fields "
                                     f"separated by {sep!r}, got {len(parts)}")
                tags = parts[i_g].split("|" if fmt == "movielens-dat" else " ")
            by_id[parts[i_id].strip()] = _clean_genres(tags)
    return tuple(by_id.get(str(raw), ()) for raw in item_ids.tolist())


# ---------------------------------------------------------------------------------------------
# synthetic data (§8.1)
# ---------------------------------------------------------------------------------------------
def synthetic_ratings(
    *,
    n_users: int = 300,
    n_items: int = 200,
    rank: int = 5,
    density: float = 0.1,
    noise_std: float = 0.5,
    r_min: float = 1.0,
    r_max: float = 5.0,
    genres: int = 0,
    seed: int = 0,
) -> Ratings:
    """Low-rank non-negative ground truth + Gaussian noise, clipped to [r_min, r_max] (§8.1).

    Ground truth ``r_min + (r_max − r_min)·⟨a_i, b_j⟩ / max⟨a, b⟩`` with ``a_i, b_j`` uniform on
    ``[0, 1]^rank`` (the maximum taken over the observed cells), i.e. non-negative factors of rank
    ≤ rank + 1 whose products span the range. Cells are observed independently with probability
    ``density``; a user with fewer than 2 observed cells gets 2 fixed random items instead. With
    ``genres > 0`` each item gets 1 or 2 distinct genres among ``"g0" … "g{genres-1}"``. Clipping
    the noisy values is part of the generator (a draw from the clipped model), not input repair.
    """
    n_users = check_int(n_users, "n_users", minimum=1)
    n_items = check_int(n_items, "n_items", minimum=2)
    rank = check_int(rank, "rank", minimum=1)
    density = check_probability(density, "density")
    noise_std = check_positive(noise_std, "noise_std", allow_zero=True)
    lo, hi = _finite(r_min, "r_min"), _finite(r_max, "r_max")
    if not 0.0 <= lo < hi:
        raise ValueError(f"the rating range must satisfy 0 <= r_min < r_max, got r_min={r_min!r}, r_max={r_max!r}")
    genres = check_int(genres, "genres", minimum=0)
    seed = check_int(seed, "seed", minimum=0)
    rng = stream(seed, 0, SERVER, "mf-synthetic")
    a = rng.random((n_users, rank))
    b = rng.random((n_items, rank))
    cells = _bernoulli_cells(n_users * n_items, density, rng)
    # every user keeps at least 2 ratings: two distinct fixed random items per user
    first = np.floor(rng.random(n_users) * n_items).astype(np.int64)
    second = (first + 1 + np.floor(rng.random(n_users) * (n_items - 1)).astype(np.int64)) % n_items
    short = np.flatnonzero(np.bincount(cells // n_items, minlength=n_users) < 2)
    cells = np.union1d(cells, np.concatenate((short * n_items + first[short], short * n_items + second[short])))
    users, items = cells // n_items, cells % n_items
    raw = np.einsum("ij,ij->i", a[users], b[items])
    truth = lo + (hi - lo) * raw / raw.max()
    values = np.clip(truth + noise_std * rng.standard_normal(cells.size), lo, hi)
    item_genres = _synthetic_genres(n_items, genres, rng) if genres else None
    return Ratings(users=users, items=items, values=values, n_users=n_users, n_items=n_items, r_min=lo, r_max=hi,
                   item_genres=item_genres, name=f"synthetic-{n_users}x{n_items}-rank{rank}")


def _bernoulli_cells(n_cells: int, density: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of i.i.d. Bernoulli(density) successes among ``n_cells`` cells (geometric gaps)."""
    if density == 1.0:
        return np.arange(n_cells, dtype=np.int64)
    out: list[np.ndarray] = []
    position = -1
    chunk = max(16, int(1.1 * n_cells * density) + 16)
    while position < n_cells:  # a loop over chunks of draws, usually one
        gaps = rng.geometric(density, size=chunk)
        pos = position + np.cumsum(gaps)
        out.append(pos[pos < n_cells])
        position = int(pos[-1])
    return np.concatenate(out).astype(np.int64)


def _synthetic_genres(n_items: int, genres: int, rng: np.random.Generator) -> tuple[tuple[str, ...], ...]:
    """1 or 2 distinct genre names per item among g0 … g{genres-1}."""
    first = np.floor(rng.random(n_items) * genres).astype(np.int64)
    two = (rng.random(n_items) < 0.5) & (genres > 1)
    second = (first + 1 + np.floor(rng.random(n_items) * max(genres - 1, 1)).astype(np.int64)) % genres
    names = [f"g{g}" for g in range(genres)]
    return tuple(tuple(sorted({names[f], names[s]})) if t else (names[f],)
                 for f, s, t in zip(first.tolist(), second.tolist(), two.tolist(), strict=True))
