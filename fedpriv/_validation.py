"""Boundary checks shared by the numeric core: one message format, parameter named, range stated.

Every check raises ``ValueError`` (bad value) or ``TypeError`` (bad type) with a message of the
form ``"<parameter> must be <allowed>, got <value>"`` (docs/design.md §8). No check clips or repairs.

Values that a mechanism or randomizer privatizes pass one gate, :func:`as_real_array`: real numbers
only (integer or floating dtypes, from numpy arrays, Python scalars and lists, or torch tensors).
Text is never parsed into numbers, complex numbers never lose their imaginary part, and booleans
never become 0/1: each raises ``TypeError`` naming the argument.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any

import numpy as np

__all__ = [
    "as_real_array",
    "check_array",
    "check_choice",
    "check_delta",
    "check_epsilon",
    "check_in_domain",
    "check_int",
    "check_positive",
    "check_probability",
    "check_rng",
    "check_tensor",
]


def _describe(value: Any) -> str:
    """Short repr of a bad value (arrays summarised, never dumped whole)."""
    if isinstance(value, np.ndarray) and value.size > 4:
        return f"array of shape {value.shape} (min={np.nanmin(value) if value.size else 'n/a'})"
    return repr(value)


#: Smallest budget accepted: below it a mechanism's noise scale and moments overflow float64.
EPSILON_FLOOR = 1e-50


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float | np.ndarray:
    """Return ``epsilon`` as a float (or a read-only float64 array) after checking it is > 0 and finite."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (Real, np.ndarray, list, tuple)):
        raise TypeError(f"{name} must be a positive finite number or an array of them, got {epsilon!r}")
    if np.asarray(epsilon).dtype == bool:
        raise TypeError(f"{name} must be a positive finite number or an array of them, got booleans")
    arr = as_real_array(epsilon, name)
    if arr.size == 0:
        raise ValueError(f"{name} must be a positive finite number or a non-empty array, got an empty array")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        bad = float(arr[~(np.isfinite(arr) & (arr > 0))].ravel()[0])
        raise ValueError(f"{name} must be > 0 and finite, got {bad!r}")
    if np.any(arr < EPSILON_FLOOR):
        raise ValueError(f"{name} must be >= {EPSILON_FLOOR:g} (smaller budgets overflow float64), "
                         f"got {float(np.min(arr))!r}")
    if arr.ndim == 0:
        return float(arr)
    out = arr.copy()
    out.setflags(write=False)
    return out


def check_delta(delta: Any, name: str = "delta") -> float | np.ndarray:
    """Return ``delta`` after checking it lies in the open interval (0, 1)."""
    if isinstance(delta, bool) or not isinstance(delta, (Real, np.ndarray, list, tuple)):
        raise TypeError(f"{name} must be a number in (0, 1), got {delta!r}")
    if np.asarray(delta).dtype == bool:
        raise TypeError(f"{name} must be a number in (0, 1) or an array of them, got booleans")
    arr = as_real_array(delta, name)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr >= 1):
        raise ValueError(f"{name} must be in the open interval (0, 1), got {_describe(delta)}")
    if arr.ndim == 0:
        return float(arr)
    out = arr.copy()
    out.setflags(write=False)
    return out


def check_scalar_delta(delta: Any, name: str = "delta") -> float:
    """Return ``delta`` as a float after checking it is one number in the open interval (0, 1)."""
    out = check_delta(delta, name)
    if not isinstance(out, float):
        raise TypeError(f"{name} must be a scalar in (0, 1), got an array of shape {out.shape}")
    return out


def check_positive(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float after checking it is finite and > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    ok = np.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value!r}")
    return v


def check_probability(value: Any, name: str, *, low_open: bool = True, high_open: bool = False) -> float:
    """Return ``value`` after checking it lies in (0, 1] (interval ends configurable)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    lo_ok = v > 0 if low_open else v >= 0
    hi_ok = v < 1 if high_open else v <= 1
    if not (np.isfinite(v) and lo_ok and hi_ok):
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return v


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int after checking its type and bounds."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {v}")
    return v


def check_choice(value: Any, name: str, allowed: Iterable[str]) -> str:
    """Return ``value`` after checking it is one of ``allowed``."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


#: numpy dtype kinds of real numbers: signed and unsigned integers, floats.
_REAL_KINDS = frozenset("iuf")

_KIND_WORDS = {
    "b": "booleans",
    "c": "complex numbers",
    "U": "strings (numbers are never parsed from text)",
    "S": "bytes (numbers are never parsed from text)",
    "O": "Python objects (dtype object)",
    "M": "datetimes",
    "m": "timedeltas",
    "V": "raw or structured records",
}


def _not_real(kind: str, dtype: Any) -> str:
    """Words for a non-real dtype in an error message."""
    return _KIND_WORDS.get(kind, f"dtype {dtype}")


def _torch_tensor_type() -> Any:
    """``torch.Tensor`` if torch has been imported, else None (a tensor cannot exist without it)."""
    torch = sys.modules.get("torch")
    return None if torch is None else torch.Tensor


def _tensor_kind(t: Any) -> str:
    """The numpy dtype kind that a torch tensor's dtype corresponds to."""
    if t.dtype is sys.modules["torch"].bool:
        return "b"
    if t.is_complex():
        return "c"
    return "f" if t.is_floating_point() else "i"


def as_real_array(x: Any, name: str = "x") -> np.ndarray:
    """Return ``x`` as a float64 array after checking it holds real numbers (integer or floating dtype).

    Accepts numpy arrays, Python scalars and (nested) lists of numbers, and torch tensors (detached,
    moved to the CPU). Raises ``TypeError`` naming ``name`` for strings, bytes, object arrays, complex
    numbers and booleans. Finiteness and shape are the caller's (see :func:`check_array`).
    """
    allowed = f"{name} must be a numeric array of real numbers (integers or floats)"
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{allowed}, got {type(x).__name__}")
    tensor = _torch_tensor_type()
    if tensor is not None and isinstance(x, tensor):
        kind = _tensor_kind(x)
        if kind not in _REAL_KINDS:
            raise TypeError(f"{allowed}, got a tensor of {_not_real(kind, x.dtype)}")
        return x.detach().cpu().to(sys.modules["torch"].float64).numpy()
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:  # e.g. a ragged list
        raise TypeError(f"{allowed}, got {type(x).__name__}") from exc
    if arr.dtype.kind not in _REAL_KINDS:
        raise TypeError(f"{allowed}, got {_not_real(arr.dtype.kind, arr.dtype)}")
    return arr.astype(np.float64, copy=False)


def check_array(x: Any, name: str = "x", *, allow_empty: bool = False) -> np.ndarray:
    """Return ``x`` as a float64 array after checking it holds real numbers, all finite, and (by default) some."""
    arr = as_real_array(x, name)
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must be a non-empty array, got an array of shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        n_bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} must be finite, got {n_bad} NaN/inf value(s)")
    return arr


def check_tensor(x: Any, name: str, *, floating: bool = False, shape: str = "") -> Any:
    """Return ``x`` after checking it is a torch tensor of real numbers (floating only, with ``floating``).

    Booleans and complex numbers are always refused; integers only with ``floating=True``.
    ``shape`` words the expected shape for the message (e.g. ``" of shape (N, d)"``).
    """
    tensor = _torch_tensor_type()
    if tensor is None or not isinstance(x, tensor):
        raise TypeError(f"{name} must be a torch.Tensor{shape}, got {type(x).__name__}")
    kind = _tensor_kind(x)
    if floating and kind != "f":
        words = "integers" if kind in _REAL_KINDS else _not_real(kind, x.dtype)
        raise TypeError(f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64), "
                        f"got dtype {x.dtype} ({words})")
    if kind not in _REAL_KINDS:
        raise TypeError(f"{name} must be a real floating-point or integer tensor, got dtype {x.dtype} "
                        f"({_not_real(kind, x.dtype)})")
    return x


def check_in_domain(x: np.ndarray, lo: Any, hi: Any, name: str = "x") -> None:
    """Raise if any entry of ``x`` lies outside ``[lo, hi]`` (mechanisms never clip silently)."""
    outside = (x < lo) | (x > hi)  # may broadcast beyond x's shape (per-user bounds)
    if np.any(outside):
        worst = np.broadcast_to(x, outside.shape)[outside].ravel()[0]
        lo_s = f"{float(np.min(lo)):g}" if np.size(lo) > 1 else f"{float(np.asarray(lo)):g}"
        hi_s = f"{float(np.max(hi)):g}" if np.size(hi) > 1 else f"{float(np.asarray(hi)):g}"
        raise ValueError(
            f"{name} must lie in the mechanism's input domain [{lo_s}, {hi_s}], got {float(worst)!r} "
            f"(clip or rescale the data first, e.g. with fedpriv.mechanisms.AffineAdapter)"
        )


def check_rng(rng: Any, name: str = "rng") -> np.random.Generator:
    """Return ``rng`` after checking it is a ``numpy.random.Generator`` (no fallback to global state)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{name} must be a numpy.random.Generator (e.g. fedpriv.rng.stream(...)), "
                        f"got {type(rng).__name__}")
    return rng
