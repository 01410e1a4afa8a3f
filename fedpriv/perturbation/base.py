"""What every update perturbation shares: L2 clipping with a report, the result records, the ABC.

Every perturbation has one implementation, ``_perturb_rows``, vectorized over a batch of updates
(one row per client, each row drawing from its own keyed stream through
:class:`fedpriv.rng.RowStreams`); ``perturb`` runs it on a single row, ``perturb_rows`` on many.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch

from fedpriv._frozen import Frozen
from fedpriv._validation import check_epsilon, check_positive, check_scalar_delta, check_tensor
from fedpriv.mechanisms.base import Guarantee
from fedpriv.rng import CounterRows, RowDraws, RowStreams

__all__ = [
    "ClipReport",
    "PerturbedRows",
    "PerturbedUpdate",
    "Perturbation",
    "as_flat_float64",
    "as_row_streams",
    "check_mechanism_params",
    "check_rows",
    "check_scalar_budget",
    "clip_l2",
    "clip_rows",
    "cosine",
    "cosine_rows",
]


@dataclass(frozen=True)
class ClipReport:
    """What clipping did: the norm before, the bound, and whether anything was scaled down."""

    norm_before: float
    clip_norm: float
    clipped: bool


def as_flat_float64(update: Any, name: str = "update") -> torch.Tensor:
    """Flatten ``update`` to a float64 1-D tensor after checking it is a finite, non-empty floating-point tensor."""
    check_tensor(update, name, floating=True)
    if update.numel() == 0:
        raise ValueError(f"{name} must be non-empty, got a tensor of shape {tuple(update.shape)}")
    flat = update.detach().reshape(-1).to(torch.float64)
    if not bool(torch.isfinite(flat).all()):
        n_bad = int((~torch.isfinite(flat)).sum())
        raise ValueError(f"{name} must be finite, got {n_bad} NaN/inf value(s)")
    return flat


def direct_norms(rows: torch.Tensor) -> torch.Tensor | None:
    """L2 norms over the last dimension of ``rows`` taken directly (one pass), or None where they cannot be trusted.

    None when any norm is not finite (the row holds NaN/inf, or squaring overflowed) or lies below
    √(smallest normal) (precision lost to underflow; zero rows included): the caller then takes
    :func:`clip_rows`' norms of v/max|v|. A finite result shows every row finite.
    """
    norms = torch.linalg.vector_norm(rows.detach(), dim=-1)
    if bool((torch.isfinite(norms) & (norms >= math.sqrt(torch.finfo(norms.dtype).tiny))).all()):
        return norms
    return None


def clip_rows(rows: torch.Tensor, bound: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scale each row of ``rows`` (N, d) to L2 norm ≤ ``bound``: (clipped, norms before (N,) float64, clipped (N,)).

    Row i becomes v_i / max(1, ‖v_i‖/C). The norm is taken of v_i / max|v_i| and scaled back, so a
    finite row whose norm overflows float64 is still clipped to its direction. Rows with norm ≤ C,
    zero rows included, are returned unchanged bit for bit; so is ``rows`` itself when none is clipped.
    """
    bound = check_positive(bound, "clip_norm")
    if rows.ndim != 2:
        raise ValueError(f"rows must have shape (N, d), got {tuple(rows.shape)}")
    if rows.numel() == 0:
        n = rows.shape[0]
        return rows, torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.bool)
    peak = rows.abs().amax(dim=-1)
    unit = rows / torch.where(peak > 0, peak, torch.ones_like(peak)).unsqueeze(-1)  # scaled first: ‖v‖ may overflow
    unit_norm = torch.linalg.vector_norm(unit, dim=-1)
    norms = peak.double() * unit_norm.double()  # zero rows: 0
    clipped = norms > bound
    if not bool(clipped.any()):
        return rows, norms, clipped
    # C/‖v/peak‖ in float64 as a true division (``bound / tensor`` is bound·(1/tensor), not correctly rounded),
    # applied in torch's compute type of the dtype (float32 for half types), as v·(C/‖v‖) with a Python float is
    opmath = torch.float64 if rows.dtype == torch.float64 else torch.float32
    factor = (torch.full_like(norms, bound) / unit_norm.double()).to(opmath)
    scaled = (unit * factor.unsqueeze(-1)).to(rows.dtype)
    if bool(clipped.all()):  # the common case in training (most minibatch gradients exceed C): no select pass
        return scaled, norms, clipped
    return torch.where(clipped.unsqueeze(-1), scaled, rows), norms, clipped


def clip_l2(v: torch.Tensor, bound: float) -> tuple[torch.Tensor, ClipReport]:
    """Scale ``v`` to L2 norm ≤ ``bound`` (v / max(1, ‖v‖/C)); a zero vector is returned unchanged."""
    bound = check_positive(bound, "clip_norm")
    out, norms, clipped = clip_rows(v.reshape(1, -1), bound)
    report = ClipReport(norm_before=float(norms[0]) if v.numel() else 0.0, clip_norm=bound,
                        clipped=bool(clipped[0]) if v.numel() else False)
    return (out.reshape(v.shape) if report.clipped else v), report


def cosine_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cos of the angle between ``a`` and ``b`` (..., d), float64; 0 where either row is zero."""
    na = torch.linalg.vector_norm(a, dim=-1).double()
    nb = torch.linalg.vector_norm(b, dim=-1).double()
    dot = (a * b).sum(dim=-1).double()
    zero = (na == 0) | (nb == 0)
    cos = (dot / torch.where(zero, torch.ones_like(na), na * nb)).clamp(-1.0, 1.0)  # clamp rounding past ±1
    return torch.where(zero, torch.zeros_like(cos), cos)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """cos of the angle between ``a`` and ``b``; 0 when either is the zero vector."""
    return float(cosine_rows(a.reshape(1, -1), b.reshape(1, -1))[0])


def check_mechanism_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """Copy of a base mechanism's extra parameters; ``delta`` and ``sensitivity`` are derived, not set."""
    params = dict(params or {})
    for key in ("delta", "sensitivity"):
        if key in params:
            raise ValueError(f"mechanism_params must not set {key!r}: the perturbation derives it")
    return params


def check_scalar_budget(mechanism: str, epsilon: Any, delta: Any) -> tuple[float, float | None]:
    """Validate an update perturbation's (ε, δ): scalar ε > 0; δ in (0, 1) for Gaussian only."""
    eps = check_epsilon(epsilon)
    if isinstance(eps, np.ndarray):
        raise TypeError("epsilon must be a scalar for an update perturbation, got an array")
    if mechanism == "gaussian":
        if delta is None:
            raise TypeError("delta is required for the gaussian mechanism (a number in (0, 1))")
        return eps, check_scalar_delta(delta)
    if delta is not None:
        raise ValueError(f"delta applies to the gaussian mechanism only, got delta={delta!r} for {mechanism!r}")
    return eps, None


@dataclass(frozen=True)
class PerturbedUpdate:
    """A privatized update, the guarantee of the call that made it, and per-call metrics."""

    vector: torch.Tensor
    guarantee: Guarantee
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PerturbedRows:
    """A batch of privatized updates, one row per client, with per-row metrics.

    Attributes
    ----------
    vectors : Tensor, shape (N, d)
        Row i is what ``perturb(updates[i], generators[i]).vector`` returns (same dtype and device
        as the input batch).
    guarantee : Guarantee
        The guarantee of one row (``guarantee_for(d)``); ``claim_holds`` says where this batch's
        data voided it.
    metrics : dict of str to ndarray of shape (N,)
        The metrics of :meth:`Perturbation.perturb`, one entry per row.
    claim_holds : ndarray of bool, shape (N,)
        False where the row's ``metrics["privacy_claim"]`` is 0 (e.g. LDPVec ``magnitude="keep"``
        released the exact norm of that update).
    """

    vectors: torch.Tensor
    guarantee: Guarantee
    metrics: dict[str, np.ndarray]
    claim_holds: np.ndarray


RowMetrics = dict[str, np.ndarray]

#: About how many values ``perturb_rows`` transforms per vectorized call: 2**20 (8 MiB per float64
#: temporary). Smaller blocks pay Python overhead per block; measured on the batched engine's LR round
#: (1000 clients, d = 7850): 2**15 → 0.79 s, 2**17 → 0.72 s, 2**21 → 0.70 s per round.
ROW_BLOCK_VALUES = 2**20


def as_row_streams(streams: Any, n_rows: int) -> RowStreams:
    """``streams`` as a :class:`RowStreams` after checking it has one numpy Generator per row."""
    if isinstance(streams, RowStreams):
        rs = streams
    elif isinstance(streams, Sequence) and not isinstance(streams, (str, bytes)):
        bad = [i for i, g in enumerate(streams) if not isinstance(g, np.random.Generator)]
        if bad:
            raise TypeError("streams must be a RowStreams or a sequence of numpy.random.Generator, one per row, "
                            f"got {type(streams[bad[0]]).__name__} at index {bad[0]}")
        if not streams:
            raise ValueError(f"streams must hold one generator per row of updates ({n_rows}), got 0")
        rs = RowStreams(streams)
    else:
        raise TypeError(
            f"streams must be a fedpriv.rng.RowStreams or a sequence of numpy.random.Generator (one per row, e.g. "
            f"[fedpriv.rng.stream(seed, round, c, 'noise') for c in client_ids]), got {type(streams).__name__}"
        )
    if len(rs) != n_rows:
        raise ValueError(f"streams must hold one generator per row of updates ({n_rows}), got {len(rs)}")
    return rs


def check_rows(updates: Any, name: str = "updates", *, finite: bool = True) -> torch.Tensor:
    """Return ``updates`` after checking it is a finite, non-empty, floating-point (N, d) tensor (no copy).

    ``finite=False`` leaves the finiteness check (a pass over the block) to the caller (:func:`direct_norms`).
    """
    check_tensor(updates, name, floating=True, shape=" of shape (N, d)")
    if updates.ndim != 2:
        raise ValueError(f"{name} must have shape (N, d), one flattened update per row, "
                         f"got shape {tuple(updates.shape)}")
    if updates.numel() == 0:
        raise ValueError(f"{name} must be non-empty, got a tensor of shape {tuple(updates.shape)}")
    if not finite:
        return updates
    lo, hi = torch.aminmax(updates.detach())  # min/max propagate NaN: one read pass, no (N, d) mask
    if not bool(torch.isfinite(lo) & torch.isfinite(hi)):
        ok = torch.isfinite(updates.detach())
        bad_rows = torch.nonzero(~ok.all(dim=-1)).flatten().tolist()
        n_bad = int(ok.numel() - int(ok.sum()))
        shown = ", ".join(map(str, bad_rows[:5])) + (", ..." if len(bad_rows) > 5 else "")
        raise ValueError(f"{name} must be finite, got {n_bad} NaN/inf value(s) in row(s) {shown}")
    return updates


class Perturbation(Frozen):
    """Privatizes flattened model updates; built once from a mechanism and its parameters.

    ``perturb(update, rng)`` clips ``update`` to ``clip_norm`` (L2), privatizes it and returns a
    :class:`PerturbedUpdate` with the same shape, dtype and device. All noise comes from ``rng``,
    a numpy Generator from :mod:`fedpriv.rng`; the transform runs in float64.
    ``perturb_rows(updates, streams)`` does the same for a batch (N, d), row i drawing from
    ``streams[i]``; it equals stacking the ``perturb`` results row by row.

    Subclasses implement ``_perturb_rows(rows, streams)`` (vectorized over rows, drawing through a
    :class:`fedpriv.rng.RowStreams`), which serves both entry points. A subclass may instead
    implement only ``_perturb(flat, rng)`` for one 1-D update: batches then take the slow path, a
    Python loop over rows. Overriding neither raises ``TypeError`` when the class is created.

    Updates must be floating-point torch tensors (integer, boolean and complex tensors raise
    ``TypeError``). A perturbation is immutable (:class:`fedpriv._frozen.Frozen`): assigning or
    deleting any attribute after construction raises ``AttributeError``, so ``guarantee_for``
    always describes the noise drawn; per-d caches live in dicts created in ``__init__``.
    """

    name: ClassVar[str]
    #: Line style of its curves in plots, and their colour (None: the base mechanism's colour).
    linestyle: ClassVar[str] = "-."
    colour: ClassVar[str | None] = None
    _rebuild_hint = "build a new perturbation instead, e.g. fedpriv.perturbation.get_perturbation(name, ...)"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls._perturb is Perturbation._perturb and cls._perturb_rows is Perturbation._perturb_rows:
            raise TypeError(
                f"{cls.__name__} must implement _perturb_rows(rows, streams) (vectorized) or _perturb(flat, rng)"
            )

    def perturb(self, update: torch.Tensor, rng: np.random.Generator | CounterRows) -> PerturbedUpdate:
        """Clip and privatize ``update``; the result keeps its shape, dtype and device.

        ``rng`` is a numpy Generator or a one-row :class:`~fedpriv.rng.CounterRows` (the LDP-SGD
        release streams); with the latter the result equals that row of ``perturb_rows``.
        """
        if isinstance(rng, CounterRows):
            if len(rng) != 1:
                raise ValueError(f"rng must be a CounterRows of one row for one update, got {len(rng)} rows")
            rows = self.perturb_rows(update.detach().reshape(1, -1), rng)
            metrics = {key: float(values[0]) for key, values in rows.metrics.items()}
            out = PerturbedUpdate(vector=rows.vectors[0].reshape(update.shape), guarantee=rows.guarantee,
                                  metrics=metrics)
            return self._voided(out)
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy.random.Generator (e.g. fedpriv.rng.stream(...)) or a "
                            f"fedpriv.rng.CounterRows, got {type(rng).__name__}")
        flat = as_flat_float64(update).cpu()
        out_rows, row_metrics = self._release_rows(flat.unsqueeze(0), RowStreams([rng]))
        metrics = {key: float(values[0]) for key, values in row_metrics.items()}
        vector = out_rows[0].reshape(update.shape).to(dtype=update.dtype, device=update.device)
        return self._voided(PerturbedUpdate(vector=vector, guarantee=self.guarantee_for(flat.numel()), metrics=metrics))

    def _voided(self, out: PerturbedUpdate) -> PerturbedUpdate:
        """``out`` with its guarantee marked as not holding when the call's metrics say its data voided it."""
        guarantee = out.guarantee
        if out.metrics.get("privacy_claim", 1.0) == 0.0:  # this call's data voided the claim (e.g. a leaked norm)
            guarantee = replace(guarantee, holds=False, note=guarantee.note or "the claim does not hold for this call")
        return replace(out, guarantee=guarantee)

    def perturb_rows(self, updates: torch.Tensor,
                     streams: RowStreams | CounterRows | Sequence[np.random.Generator]) -> PerturbedRows:
        """Clip and privatize each row of ``updates`` (N, d), row i drawing from ``streams[i]``.

        Row i of the result equals ``perturb(updates[i], streams[i])`` (same draws, same metrics).
        The transform is vectorized over rows; it runs on blocks of about ``ROW_BLOCK_VALUES``
        values at a time so that its temporaries stay in cache. Rows are independent, so the
        blocking changes no result. Everything is checked before the first draw.

        With a :class:`~fedpriv.rng.CounterRows`, a perturbation that has a native transform
        (:meth:`_native_rows`: coordinatewise Gaussian and Laplace) runs it in the updates' dtype
        and device; the others run their float64 transform on the CPU, drawing from the rows'
        counter streams.
        """
        native = isinstance(streams, CounterRows) and updates.ndim == 2 and self._has_native(updates.shape[-1])
        updates = check_rows(updates, finite=not native)  # native: the row norms below check finiteness
        n_rows, d = updates.shape
        norms = direct_norms(updates) if native else None
        if native and norms is None:
            check_rows(updates)  # names the rows holding NaN/inf; past it a norm over- or underflowed
        if isinstance(streams, CounterRows):
            if len(streams) != n_rows:
                raise ValueError(f"streams must hold one row per row of updates ({n_rows}), got {len(streams)}")
            source: Any = streams.rows
        else:
            gens = as_row_streams(streams, n_rows).generators
            source = lambda start, stop: RowStreams(gens[start:stop])  # noqa: E731
        vectors = torch.empty((n_rows, d), dtype=updates.dtype, device=updates.device if native else "cpu")
        blocks: list[RowMetrics] = []
        step = max(1, ROW_BLOCK_VALUES // d)
        for start in range(0, n_rows, step):  # cache blocking over rows; each block is one vectorized call
            stop = min(start + step, n_rows)
            if native:  # formed in place in its rows of ``vectors``
                block = vectors[start:stop]
                block_metrics = self._native_rows(updates[start:stop].detach(), source(start, stop), block,
                                                  None if norms is None else norms[start:stop])
                block_metrics["output_norm"] = torch.linalg.vector_norm(block, dim=-1).double().cpu().numpy()
            else:
                rows = updates[start:stop].detach().to(device="cpu", dtype=torch.float64)
                released, block_metrics = self._release_rows(rows, source(start, stop))
                vectors[start:stop] = released
            blocks.append(block_metrics)
        metrics = {key: np.concatenate([b[key] for b in blocks]) for key in blocks[0]}
        claim = metrics.get("privacy_claim")
        claim_holds = np.ones(n_rows, dtype=bool) if claim is None else claim != 0.0
        return PerturbedRows(vectors=vectors.to(device=updates.device), guarantee=self.guarantee_for(d),
                             metrics=metrics, claim_holds=claim_holds)

    def _has_native(self, d: int) -> bool:
        """Whether :meth:`_native_rows` privatizes d-dimensional rows (default: no)."""
        return False

    def _native_rows(self, rows: torch.Tensor, streams: CounterRows, out: torch.Tensor,
                     norms: torch.Tensor | None) -> RowMetrics:
        """Privatize finite rows (N, d) into ``out`` (N, d) in their dtype and device from counter streams.

        Only where :meth:`_has_native`. ``norms`` are the rows' L2 norms taken directly (:func:`direct_norms`),
        or None where those could not be trusted: the transform then takes :func:`clip_rows`' scaled norms.
        """
        raise NotImplementedError(f"{type(self).__name__} has no native transform")

    def _release_rows(self, rows: torch.Tensor, streams: Any) -> tuple[torch.Tensor, RowMetrics]:
        """Run the transform on validated float64 rows and add each row's ``output_norm``."""
        out, metrics = self._perturb_rows(rows, streams)
        if tuple(out.shape) != tuple(rows.shape):
            raise RuntimeError(f"{type(self).__name__} returned shape {tuple(out.shape)} "
                               f"for rows of shape {tuple(rows.shape)}")
        metrics["output_norm"] = torch.linalg.vector_norm(out, dim=-1).numpy()
        return out, metrics

    def _perturb_rows(self, rows: torch.Tensor, streams: RowDraws) -> tuple[torch.Tensor, RowMetrics]:
        """Privatize finite float64 rows (N, d); return the output (N, d) float64 and metrics of shape (N,).

        Default: the slow path for subclasses that implement only ``_perturb`` — a Python loop over
        rows, row i drawing from ``streams.generators[i]`` (a :class:`~fedpriv.rng.CounterRows` gives
        each row a Generator keyed by its row key).
        """
        outs, per_row = [], []
        gens = streams.generators() if isinstance(streams, CounterRows) else streams.generators
        for row, gen in zip(rows, gens):
            out, m = self._perturb(row, gen)
            outs.append(out.to(torch.float64))
            per_row.append(m)
        keys = list(per_row[0])
        if any(set(m) != set(keys) for m in per_row):
            raise RuntimeError(f"{type(self).__name__}._perturb must return the same metric names for every update")
        return torch.stack(outs), {k: np.array([m[k] for m in per_row], dtype=np.float64) for k in keys}

    def _perturb(self, flat: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        """Privatize a finite float64 1-D update; return the output and metrics (default: ``_perturb_rows`` on it)."""
        out, metrics = self._perturb_rows(flat.unsqueeze(0), RowStreams([rng]))
        return out[0], {key: float(values[0]) for key, values in metrics.items()}

    @abstractmethod
    def guarantee_for(self, d: int) -> Guarantee:
        """The guarantee of one call on a d-dimensional update."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """The parameters this perturbation was built with (for run logs)."""
