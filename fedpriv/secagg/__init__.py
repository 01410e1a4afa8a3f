"""Secure aggregation (docs/federated_mf.md §6): the ``SA_ω`` interface, its oracle, the real protocol, distributed DP noise.

* :mod:`~fedpriv.secagg.base` — :class:`SecureAggregator` (exact sum over survivors or a clean
  halt below ``t = ⌈(1−ω)n⌉``), :class:`DropoutModel`, :class:`AggregationResult`.
* :mod:`~fedpriv.secagg.oracle` — the ideal functionality as a vectorized float sum (simulation).
* :mod:`~fedpriv.secagg.protocol` — Bonawitz et al. 2017 (honest-but-curious) over the complete graph
  or SecAgg+'s random Harary graph (Bell et al. 2020; :mod:`~fedpriv.secagg.graph`, with ``(k, t)``
  from the bounds of :mod:`~fedpriv.secagg.bounds`), over :mod:`~fedpriv.secagg.crypto` (X25519,
  HKDF, ChaCha20-Poly1305, AES-256-CTR PRG from ``cryptography``), :mod:`~fedpriv.secagg.shamir`
  and the fixed-point :mod:`~fedpriv.secagg.encoding`; see docs/secagg.md.
* :mod:`~fedpriv.secagg.noise` — the two-round distributed Gaussian noise of §6.3 with the §6.4
  correction; :class:`~fedpriv.secagg.ledger.DistributedDpLedger` charges it at its true σ_eff.
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy), so a light submodule loads alone
    from fedpriv.secagg.base import (
        STAGES,
        AggregationResult,
        DropoutModel,
        SecAggHalted,
        SecureAggregator,
        survivor_threshold,
    )
    from fedpriv.secagg.bounds import HararyBounds, harary_bounds, harary_parameters
    from fedpriv.secagg.encoding import (
        EncodingOverflowError,
        FixedPointCodec,
        required_clip_range,
    )
    from fedpriv.secagg.graph import (
        AUTO_HARARY_MIN_CLIENTS,
        GRAPHS,
        GraphPolicy,
        MaskingGraph,
        SecAggGuarantee,
    )
    from fedpriv.secagg.ledger import DistributedDpLedger, IterationSpend
    from fedpriv.secagg.noise import (
        MODES,
        NoisySum,
        TwoRoundNoise,
        combine_rounds,
        noise_shares,
        round1_reports,
        round2_reports,
        two_round_sum,
    )
    from fedpriv.secagg.oracle import OracleAggregator
    from fedpriv.secagg.protocol import (
        InboxMsg,
        KeysMsg,
        MaskedMsg,
        ProtocolAggregator,
        ProtocolConfig,
        ProtocolViolation,
        RosterMsg,
        SecAggClient,
        SecAggServer,
        ShareAuthenticationError,
        SharesMsg,
        UnmaskMsg,
        UnmaskRequest,
    )
    from fedpriv.secagg.registry import AGGREGATORS, get_aggregator

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "AGGREGATORS",
    "AUTO_HARARY_MIN_CLIENTS",
    "GRAPHS",
    "MODES",
    "STAGES",
    "AggregationResult",
    "DistributedDpLedger",
    "DropoutModel",
    "EncodingOverflowError",
    "FixedPointCodec",
    "GraphPolicy",
    "HararyBounds",
    "InboxMsg",
    "IterationSpend",
    "KeysMsg",
    "MaskedMsg",
    "MaskingGraph",
    "NoisySum",
    "OracleAggregator",
    "ProtocolAggregator",
    "ProtocolConfig",
    "ProtocolViolation",
    "RosterMsg",
    "SecAggClient",
    "SecAggGuarantee",
    "SecAggHalted",
    "SecAggServer",
    "SecureAggregator",
    "ShareAuthenticationError",
    "SharesMsg",
    "TwoRoundNoise",
    "UnmaskMsg",
    "UnmaskRequest",
    "combine_rounds",
    "get_aggregator",
    "harary_bounds",
    "harary_parameters",
    "noise_shares",
    "required_clip_range",
    "round1_reports",
    "round2_reports",
    "survivor_threshold",
    "two_round_sum",
]
