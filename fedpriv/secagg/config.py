"""The configuration keys of secure aggregation with distributed DP noise (secure-sum and LFL matrix factorization)."""

from __future__ import annotations

from fedpriv.data.config import MEAN_DATA
from fedpriv.federated.config import LDP_SGD
from fedpriv.keys import COMMON, ConfigView, Key, compose, unit_closed_left

__all__ = ["SECAGG", "SECURE_SUM", "SecureSumConfig"]

SECAGG: dict[str, Key] = {
    "secagg": Key("oracle", str, "secure-sum and mf (lfl): the SA_ω implementation, the ideal functionality (exact "
                  "float sum) or the Bonawitz et al. protocol with fixed-point encoding", choices=("oracle", "protocol")),
    "secagg-omega": Key(0.3, float, "secure-sum and mf (lfl): tolerated drop-out fraction ω (an instance halts below "
                        "t = ⌈(1−ω)n⌉ present clients; mf needs ω > 0)", check=unit_closed_left, allowed="in [0, 1)"),
    "secagg-noise": Key("corrected", str, "secure-sum and mf (lfl): two-round noise of spec §6.4, the corrected "
                        "scheme or the source's (leaky round 2, charged at its true σ_eff)",
                        choices=("corrected", "paper")),
    "dropout-rate": Key(0.0, float, "secure-sum and mf (lfl): per-step drop-out probability at key sharing and "
                        "masked upload (secure-sum: <= secagg-omega; mf: < secagg-omega)", check=unit_closed_left,
                        allowed="in [0, 1)"),
}

#: The keys of the secure-sum task: secure aggregation, the users' vectors, and their L2 bound ``clip-norm``.
SECURE_SUM = compose(SECAGG, MEAN_DATA, {"clip-norm": LDP_SGD["clip-norm"]})


class SecureSumConfig(ConfigView):
    """The typed configuration of a secure-sum run."""

    KEYS = compose(COMMON, SECURE_SUM)
