"""Comparing two float32 code paths that round differently, with a tolerance derived from each comparison.

Where it applies: the batched (``torch.func.vmap``) client path against the per-client path, the
batched engine against the fast engine, chunkings of the batched engine, and any of these at another
torch thread count. Such paths compute the same real function of the same inputs (the same
minibatches and keyed noise draws) but order and block their reductions (sums, dot products,
convolutions) differently, and which kernel runs, and how it splits a reduction, depends on the CPU
(AVX2 or AVX-512 kernels) and on the thread count. A fixed number of float32 ulps, found on one
machine, does not carry to another: the local steps, the clip and a mechanism amplify a first
rounding difference by an amount that depends on the model, the data and the noise.

Derivation. Run each path twice on the same inputs: in float32 (as in production) and in float64
(model, data and arithmetic in float64, the same draws). Elementwise, by the triangle inequality,

    |A32 − B32| ≤ |A32 − A64| + |A64 − B64| + |B64 − B32|.

The outer terms are the float32 rounding errors of the two paths (up to float64's own error),
measured on this CPU and thread count and including every amplification by later steps; call their
maxima R_A and R_B. The middle term is the same reordering at float64's unit roundoff 2⁻⁵³ instead
of float32's 2⁻²⁴. To first order a computation's rounding error is u·Σ_j c_j δ_j with |δ_j| ≤ 1 and
coefficients c_j set by the computation and its data, not by the precision (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., 2002, §3.1 and §4.2: a dot product or sum of K terms is
off by at most γ_K·Σ|terms|, γ_K = K·u/(1 − K·u), in any order), so the middle term is about
2⁻²⁹ ≈ 2·10⁻⁹ times R_A + R_B (measured: at most 0.93·2⁻²⁹ times on the batched-vs-per-client cases).
Every comparison therefore asserts

    max |A32 − B32| ≤ 2·(R_A + R_B)

(per client row where rows are compared): the factor 2 leaves the middle term a margin of about 2²⁹
over its expected size. A wrong step, learning rate or noise sign moves the result by far more than
float32 rounding and fails. Quantities with jumps (a clip decision, an accuracy count, a sign drawn
by Duchi's mechanism) obey the same inequality: a jump between A32 and B32 appears in R_A or R_B.

The engines still round uploads and models to float32 between rounds (their message format) in the
float64 run; where an upload lies within float64 rounding of a float32 rounding boundary (about 2⁻²⁹
of the values) A64 and B64 differ by that one float32 ulp, one of the many float32 roundings R_A
already holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedpriv.config import RunConfig
from fedpriv.models import build_model

__all__ = ["assert_agree", "engine_run", "torch_threads"]


def _array(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def _max(diff: np.ndarray, rows: bool) -> np.ndarray:
    if rows and diff.ndim >= 2:
        return diff.reshape(diff.shape[0], -1).max(axis=1)
    return diff if rows else np.asarray(diff.max(initial=0.0))


def assert_agree(a32: Any, b32: Any, *, a64: Any, b64: Any, rows: bool = False, what: str = "") -> None:
    """Assert max|a32 − b32| ≤ 2·(max|a32 − a64| + max|b32 − b64|): two paths within their float32 rounding.

    ``a64``/``b64`` are the same paths run in float64 on the same inputs (module docstring). With
    ``rows`` the maxima are taken per leading row (per client); a 1-D array is then compared entry
    by entry.
    """
    a32, b32, a64, b64 = map(_array, (a32, b32, a64, b64))
    if not a32.shape == b32.shape == a64.shape == b64.shape:
        raise ValueError(f"{what}: shapes differ: {a32.shape}, {b32.shape}, {a64.shape}, {b64.shape}")
    diff = _max(np.abs(a32 - b32), rows)
    tol = 2 * (_max(np.abs(a32 - a64), rows) + _max(np.abs(b32 - b64), rows))
    bad = np.flatnonzero(np.atleast_1d(diff > tol))
    if bad.size:
        i = int(bad[0])
        raise AssertionError(
            f"{what}: the two paths differ by {np.atleast_1d(diff)[i]:.3g} (row {i}), more than twice their "
            f"float32 rounding errors ({np.atleast_1d(tol)[i] / 2:.3g}); {bad.size} row(s) fail")


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)``; restore the previous count afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def engine_run(engine: str, config: RunConfig, *, float64: bool = False,
               **kwargs: Any) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """All rounds of ``config`` on the in-process ``engine`` ("fast", "batched"): final params and records.

    With ``float64`` the run's model is float64, so each round trains and privatizes in float64;
    uploads and the global model are still float32 between rounds, as in the engine. The engine sets
    its own torch thread count (the fast engine 1, the batched engine every core); it is restored.
    ``kwargs`` go to :func:`simulations.runner.run` (e.g. ``memory_mb``).
    """
    import tempfile

    import fedpriv.workloads.ldp_sgd.workload as ldp_sgd
    from simulations.runner import run

    def model64(*args: Any, **kw: Any) -> torch.nn.Module:
        return build_model(*args, **kw).to(torch.float64)

    with torch_threads(torch.get_num_threads()), pytest.MonkeyPatch.context() as patch, \
            tempfile.TemporaryDirectory() as root:
        if float64:
            patch.setattr(ldp_sgd, "build_model", model64)
        result = run(config, engine=engine, root=Path(root), **kwargs)
    return np.asarray(result.params), list(result.rounds)
