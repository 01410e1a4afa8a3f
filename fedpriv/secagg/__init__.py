"""Secure aggregation (federated_mf.md §6): the ``SA_ω`` interface, its oracle, the real protocol, distributed DP noise.

* :mod:`~fedpriv.secagg.base` — :class:`SecureAggregator` (exact sum over survivors or a clean
  halt below ``t = ⌈(1−ω)n⌉``), :class:`DropoutModel`, :class:`AggregationResult`.
* :mod:`~fedpriv.secagg.oracle` — the ideal functionality as a vectorized float sum (simulation).
* :mod:`~fedpriv.secagg.protocol` — Bonawitz et al. 2017 (complete graph, honest-but-curious) over
  :mod:`~fedpriv.secagg.crypto` (X25519, HKDF, ChaCha20-Poly1305, ChaCha20 PRG from ``cryptography``),
  :mod:`~fedpriv.secagg.shamir` and the fixed-point :mod:`~fedpriv.secagg.encoding`.
* :mod:`~fedpriv.secagg.noise` — the two-round distributed Gaussian noise of §6.3 with the §6.4
  correction; :mod:`~fedpriv.secagg.accounting` charges it at its true σ_eff.
"""

from fedpriv.secagg.accounting import (
    DistributedDpLedger,
    IterationSpend,
    calibrate_sigma,
)
from fedpriv.secagg.base import (
    STAGES,
    AggregationResult,
    DropoutModel,
    SecAggHalted,
    SecureAggregator,
    survivor_threshold,
)
from fedpriv.secagg.encoding import (
    EncodingOverflowError,
    FixedPointCodec,
    required_clip_range,
)
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
    ProtocolError,
    RosterMsg,
    SecAggClient,
    SecAggServer,
    ShareAuthenticationError,
    SharesMsg,
    UnmaskMsg,
    UnmaskRequest,
)
from fedpriv.secagg.registry import AGGREGATORS, get_aggregator

__all__ = [
    "AGGREGATORS",
    "MODES",
    "STAGES",
    "AggregationResult",
    "DistributedDpLedger",
    "DropoutModel",
    "EncodingOverflowError",
    "FixedPointCodec",
    "InboxMsg",
    "IterationSpend",
    "KeysMsg",
    "MaskedMsg",
    "NoisySum",
    "OracleAggregator",
    "ProtocolAggregator",
    "ProtocolConfig",
    "ProtocolError",
    "RosterMsg",
    "SecAggClient",
    "SecAggHalted",
    "SecAggServer",
    "SecureAggregator",
    "ShareAuthenticationError",
    "SharesMsg",
    "TwoRoundNoise",
    "UnmaskMsg",
    "UnmaskRequest",
    "calibrate_sigma",
    "combine_rounds",
    "get_aggregator",
    "noise_shares",
    "required_clip_range",
    "round1_reports",
    "round2_reports",
    "survivor_threshold",
    "two_round_sum",
]
