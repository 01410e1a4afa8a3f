"""``get_aggregator(name, ...)``: the secure aggregator named in a configuration (``"oracle"`` or ``"protocol"``)."""

from __future__ import annotations

from fedpriv._validation import check_choice
from fedpriv.secagg.base import SecureAggregator
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import GraphPolicy
from fedpriv.secagg.oracle import OracleAggregator
from fedpriv.secagg.protocol import ProtocolAggregator

__all__ = ["AGGREGATORS", "get_aggregator"]

#: Names accepted by :func:`get_aggregator` (and by the ``secagg`` configuration key).
AGGREGATORS: tuple[str, ...] = ("oracle", "protocol")


def get_aggregator(name: str, *, omega: float, codec: FixedPointCodec | None = None, seed: int = 0,
                   graph: GraphPolicy | None = None) -> SecureAggregator:
    """The ``SA_ω`` implementation ``name``; ``"protocol"`` needs the fixed-point ``codec``.

    ``graph`` (protocol only) picks the masking graph; the default ``GraphPolicy()`` is ``"auto"``:
    the complete graph below 100 clients, SecAgg+'s Harary graph from 100 on (docs/secagg.md).
    """
    check_choice(name, "aggregator", AGGREGATORS)
    if name == "oracle":
        return OracleAggregator(omega=omega)
    if codec is None:
        raise ValueError("codec must be a FixedPointCodec for aggregator 'protocol' (the protocol sums integers "
                         "modulo 2^b), got None; build one with FixedPointCodec.for_clients(clip_range, num_clients)")
    return ProtocolAggregator(omega=omega, codec=codec, seed=seed, graph=graph)
