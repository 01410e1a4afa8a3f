"""Helpers of the fedpriv strategies: reply validation, the round report, the round-failure error.

No arithmetic on updates happens here (that is :mod:`fedpriv.federated.aggregate`); these helpers
unpack Flower records, check them against the message contract (:mod:`clients.contract`) and say
in words what is wrong with a reply.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import TypeGuard

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, MetricRecordValues
from flwr.serverapp import Grid, ServerApp

from clients.contract import (
    ARRAYS,
    CLIENT_ID,
    METRICS,
    NUM_EXAMPLES,
    ORACLE_CLEAN,
    PARAMS,
)
from fedpriv.errors import FedprivError
from fedpriv.federated.aggregate import validate_update

__all__ = [
    "Layout",
    "ResettableHolder",
    "protocol_server_app",
    "METRIC_REDUCERS",
    "ParsedReply",
    "RoundFailedError",
    "RoundReport",
    "aggregate_reply_metrics",
    "flat_from_arrayrecord",
    "parse_train_reply",
]


@dataclass(frozen=True)
class RoundReport:
    """What happened to the replies of one training round.

    Attributes
    ----------
    server_round : int
    num_replies : int
        Replies received (valid, rejected and failed).
    client_ids : tuple of int
        Client ids of the replies that were aggregated, sorted.
    rejected : tuple of (node_id, reason)
        Replies that arrived but broke the contract (missing record, wrong shape, NaN/inf, ...).
    failed : tuple of (node_id, reason)
        Error replies (the ClientApp raised, a mod refused, the node vanished).
    """

    server_round: int
    num_replies: int
    client_ids: tuple[int, ...] = ()
    rejected: tuple[tuple[int, str], ...] = ()
    failed: tuple[tuple[int, str], ...] = ()

    @property
    def num_valid(self) -> int:
        """Number of aggregated replies."""
        return len(self.client_ids)

    def reasons(self) -> dict[str, list[str]]:
        """``{"rejected-reasons": [...], "failed-reasons": [...]}`` as ``"node <id>: <reason>"`` lines."""
        return {
            "rejected-reasons": [f"node {n}: {r}" for n, r in self.rejected],
            "failed-reasons": [f"node {n}: {r}" for n, r in self.failed],
        }


class RoundFailedError(FedprivError, RuntimeError):
    """A training round ended with fewer valid replies than ``min-clients``.

    Raised from the strategy's ``aggregate_train``; the rounds finished before it are untouched
    (the ServerApp has already reported them through ``on_round``). ``report`` holds the reasons.
    """

    def __init__(self, report: RoundReport, min_clients: int, detail: str = "") -> None:
        self.report = report
        self.min_clients = min_clients
        reasons = report.reasons()
        lines = reasons["rejected-reasons"] + reasons["failed-reasons"]
        shown = "; ".join(lines[:5]) + (f"; ... ({len(lines) - 5} more)" if len(lines) > 5 else "")
        msg = (
            f"round {report.server_round} failed: {report.num_valid} valid replies of {report.num_replies}, "
            f"min-clients={min_clients} needed ({len(report.rejected)} rejected, {len(report.failed)} failed"
            f"{': ' + shown if shown else ''})"
        )
        if detail:
            msg += f"; {detail}"
        msg += ". Fix the failing clients, or lower min-clients."
        super().__init__(msg)


@dataclass(frozen=True)
class ParsedReply:
    """A valid train reply: the client's flat parameters, its scalar metrics and (oracle) its clean parameters."""

    node_id: int
    client_id: int
    num_examples: int
    params: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)
    clean: np.ndarray | None = None


@dataclass(frozen=True)
class Layout:
    """The named arrays of a model (a torch ``state_dict`` or flat arrays) and their flattening.

    ``flatten`` concatenates the arrays in key order; when they all share one floating dtype it keeps it (and a
    single array keeps its own, so fedpriv's flat ``params`` array is aggregated exactly as before), else it
    works in float64.
    ``record`` is the inverse: each array back in its shape and dtype (integers rounded).
    """

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype, ...]

    @classmethod
    def of(cls, arrays: ArrayRecord) -> Layout:
        """The layout of ``arrays``; ``ValueError`` for an empty record or a non-numeric array."""
        values = {k: arrays[k].numpy() for k in arrays.keys()}
        if not values:
            raise ValueError("expected an ArrayRecord holding the model, got an empty one")
        for k, v in values.items():
            if not (np.issubdtype(v.dtype, np.floating) or np.issubdtype(v.dtype, np.integer)):
                raise ValueError(f"array {k!r} has dtype {v.dtype}: only floating-point and integer arrays aggregate")
        return cls(tuple(values), tuple(v.shape for v in values.values()), tuple(v.dtype for v in values.values()))

    @property
    def size(self) -> int:
        """Number of values d of the flattened model."""
        return int(sum(int(np.prod(s)) for s in self.shapes))

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the flat vector: the arrays' common floating dtype, else float64."""
        common = set(self.dtypes)
        only = next(iter(common))
        return only if len(common) == 1 and np.issubdtype(only, np.floating) else np.dtype(np.float64)

    def flatten(self, arrays: ArrayRecord, extra: frozenset[str] = frozenset()) -> np.ndarray | str:
        """The flat vector of ``arrays`` (keys ``extra`` may ride along, ignored), or why it has another layout."""
        got = set(arrays.keys())
        if got - extra != set(self.keys):
            missing, unexpected = sorted(set(self.keys) - got), sorted(got - set(self.keys) - extra)
            return (f"expected the arrays of the model sent ({len(self.keys)}), missing {missing}, "
                    f"unexpected {unexpected}")
        parts = []
        for key, shape in zip(self.keys, self.shapes):
            try:
                value = arrays[key].numpy()
            except Exception as exc:  # noqa: BLE001 - a corrupt array is a rejected reply, not a crash
                return f"array {key!r} cannot be decoded: {exc}"
            if value.shape != shape:
                return f"array {key!r}: wrong shape: expected {shape}, got {value.shape}"
            if not (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)):
                return f"array {key!r}: wrong dtype: expected a floating-point or integer array, got {value.dtype}"
            parts.append(value.ravel())
        if len(parts) == 1:  # one array: its own dtype (a non-floating reply is then rejected by validate_update)
            return parts[0]
        flat = np.concatenate(parts)
        return flat if flat.dtype == self.dtype else flat.astype(self.dtype)

    def record(self, flat: np.ndarray) -> ArrayRecord:
        """The ArrayRecord of a flat vector in this layout (each array in its shape and dtype)."""
        out, start = {}, 0
        for key, shape, dtype in zip(self.keys, self.shapes, self.dtypes):
            size = int(np.prod(shape))
            part = flat[start:start + size].reshape(shape)
            value = np.rint(part) if np.issubdtype(dtype, np.integer) else part
            out[key] = Array(np.array(value, dtype=dtype, order="C"))  # not ascontiguousarray: it makes 0-d 1-d
            start += size
        return ArrayRecord(out)


def flat_from_arrayrecord(arrays: ArrayRecord, key: str = PARAMS) -> np.ndarray:
    """The single flat array ``key`` of ``arrays``; ``ValueError`` naming what arrived otherwise."""
    if set(arrays.keys()) != {key}:
        raise ValueError(f"expected an ArrayRecord with the single array {key!r}, got keys {sorted(arrays.keys())}")
    return arrays[key].numpy()


def _is_int(v: object) -> TypeGuard[Integral]:
    return isinstance(v, Integral) and not isinstance(v, bool)


def parse_train_reply(msg: Message, expected_d: int | Layout, *, oracle: bool = False,
                      arrays_key: str = ARRAYS, weight_key: str = NUM_EXAMPLES,
                      client_id_required: bool = True) -> ParsedReply | str:
    """Check one non-error train reply against the contract; the parsed reply or why it is rejected.

    ``expected_d``: the model's layout (any named arrays, flattened in its key order), or the length d of
    fedpriv's single flat array ``params``. With ``oracle`` the ArrayRecord may also hold ``ORACLE_CLEAN``
    (the simulation oracle's clean parameters); without it such a reply is rejected, so a clean update is
    never accepted unasked. Without ``client_id_required`` a reply lacking ``client-id`` is identified by
    its node id (a ClientApp that does not speak fedpriv's contract).
    """
    layout = expected_d if isinstance(expected_d, Layout) else Layout((PARAMS,), ((int(expected_d),),),
                                                                     (np.dtype(np.float32),))
    content = msg.content
    arrays = content.array_records
    metrics = content.metric_records
    if len(arrays) != 1:
        return f"expected exactly one ArrayRecord, got {len(arrays)} ({sorted(arrays.keys())})"
    if len(metrics) != 1:
        return f"expected exactly one MetricRecord, got {len(metrics)} ({sorted(metrics.keys())})"
    (akey, record), (_, mrec) = next(iter(arrays.items())), next(iter(metrics.items()))
    if akey != arrays_key:
        return f"expected the ArrayRecord under {arrays_key!r}, got {akey!r}"
    extra = frozenset({ORACLE_CLEAN}) if oracle else frozenset()
    if layout.keys == (PARAMS,) and set(record.keys()) - extra != {PARAMS}:
        return (
            f"expected the single array {PARAMS!r} (privatized parameters)"
            f"{f' and optionally {ORACLE_CLEAN!r}' if oracle else ''}, got {sorted(record.keys())}"
            " (is the LdpMod installed on the ClientApp? is analyzer-oracle the same on clients and server?)"
        )
    params = layout.flatten(record, extra)
    if isinstance(params, str):
        return params
    reason = validate_update(params, layout.size)
    if reason is not None:
        return f"array {PARAMS!r}: {reason}" if layout.keys == (PARAMS,) else f"model arrays: {reason}"
    clean = None
    if ORACLE_CLEAN in record.keys():
        try:
            clean = record[ORACLE_CLEAN].numpy()
        except Exception as exc:  # noqa: BLE001 - a corrupt array is a rejected reply, not a crash
            return f"array {ORACLE_CLEAN!r} cannot be decoded: {exc}"
        reason = validate_update(clean, layout.size)
        if reason is not None:
            return f"array {ORACLE_CLEAN!r}: {reason}"
    fields: Mapping[str, MetricRecordValues] = mrec
    if CLIENT_ID not in fields and not client_id_required:
        fields = {**dict(mrec), CLIENT_ID: int(msg.metadata.src_node_id)}
    if CLIENT_ID not in fields:
        return f"MetricRecord {METRICS!r} lacks {CLIENT_ID!r}"
    cid = fields[CLIENT_ID]
    if not _is_int(cid) or cid < 0:
        return f"{CLIENT_ID!r} must be an int >= 0, got {cid!r}"
    if weight_key not in fields:
        return f"MetricRecord {METRICS!r} lacks {weight_key!r}"
    n = fields[weight_key]
    if not _is_int(n) or n <= 0:
        return f"{weight_key!r} must be an int > 0, got {n!r}"
    scalars: dict[str, float] = {}
    for key, value in fields.items():
        if key in (CLIENT_ID, weight_key) or isinstance(value, list):
            continue
        if isinstance(value, Real):  # metrics may be inf (guarantee-epsilon without noise): kept as they are
            scalars[key] = float(value)
    return ParsedReply(
        node_id=int(msg.metadata.src_node_id), client_id=int(cid), num_examples=int(n), params=params,
        metrics=scalars, clean=clean,
    )


#: How a metric is reduced over a round's replies when the mean by examples would mislead.
METRIC_REDUCERS = {
    "privacy-claim": min,  # the round's claim holds only if every release's claim holds
    "guarantee-epsilon": max,
    "guarantee-delta": max,
}


def aggregate_reply_metrics(replies: Iterable[ParsedReply]) -> dict[str, float]:
    """Metrics shared by every reply, averaged weighted by ``num-examples`` (or reduced per :data:`METRIC_REDUCERS`)."""
    replies = list(replies)
    if not replies:
        return {}
    common = set(replies[0].metrics)
    for r in replies[1:]:
        common &= set(r.metrics)
    n = np.array([r.num_examples for r in replies], dtype=np.float64)
    p = n / n.sum()
    out: dict[str, float] = {}
    for key in sorted(common):
        values = [r.metrics[key] for r in replies]
        reducer = METRIC_REDUCERS.get(key)
        out[key] = float(reducer(values)) if reducer is not None else float(p @ np.asarray(values))
    return out


def report_metrics(report: RoundReport, total_examples: int) -> Mapping[str, int]:
    """The counts of a round as MetricRecord-ready ints."""
    return {
        "num-replies": report.num_replies,
        "num-valid": report.num_valid,
        "rejected": len(report.rejected),
        "failed": len(report.failed),
        NUM_EXAMPLES: total_examples,
    }


def metric_record(values: Mapping[str, float | int]) -> MetricRecord:
    """A MetricRecord of plain Python scalars."""
    return MetricRecord({k: (int(v) if _is_int(v) else float(v)) for k, v in values.items()})


class ResettableHolder:
    """Mixin for a ServerApp's result dataclass: :meth:`reset` restores every field to its default."""

    def reset(self) -> None:
        """Forget a previous run's values."""
        fresh = type(self)()
        for name in self.__dataclass_fields__:  # type: ignore[attr-defined]
            setattr(self, name, getattr(fresh, name))


def protocol_server_app(protocol: Callable[[Grid], None], result: ResettableHolder,
                        errors: tuple[type[BaseException], ...]) -> ServerApp:
    """A ServerApp whose main resets ``result``, runs ``protocol(grid)``, keeps a failure (one of
    ``errors``) in ``result.error`` before re-raising it, and the wall time in ``result.seconds``."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        start = time.perf_counter()
        result.reset()
        try:
            protocol(grid)
        except errors as exc:
            result.error = str(exc)  # type: ignore[attr-defined]
            raise
        finally:
            result.seconds = time.perf_counter() - start  # type: ignore[attr-defined]

    return app
