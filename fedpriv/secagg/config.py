"""The configuration keys of secure aggregation with distributed DP noise (secure-sum and LFL matrix factorization)."""

from __future__ import annotations

from fedpriv.config_aliases import common_keys
from fedpriv.data.config import MEAN_DATA
from fedpriv.keys import ConfigView, Key, at_least, compose, in_table, open_unit, positive, unit_closed_left
from fedpriv.secagg.graph import CORRUPT_FRACTION, GRAPHS

__all__ = ["SECAGG", "SECURE_SUM", "SUM_KEYS", "SecureSumConfig"]

SECAGG: dict[str, Key] = in_table("secagg", {
    "secagg": Key("oracle", str, "secure-sum and mf (lfl): the SA_ω implementation, the ideal functionality (exact "
                  "float sum) or the Bonawitz et al. protocol with fixed-point encoding over the graph of "
                  "secagg-graph", choices=("oracle", "protocol")),
    "secagg-omega": Key(0.3, float, "secure-sum and mf (lfl): tolerated drop-out fraction ω (an instance halts below "
                        "t = ⌈(1−ω)n⌉ present clients; mf needs ω > 0)", check=unit_closed_left, allowed="in [0, 1)"),
    "secagg-noise": Key("corrected", str, "secure-sum and mf (lfl): two-round noise of docs/federated_mf.md §6.4, the "
                                          "corrected "
                        "scheme or the source's (leaky round 2, charged at its true σ_eff)",
                        choices=("corrected", "paper")),
    "dropout-rate": Key(0.0, float, "secure-sum and mf (lfl): per-step drop-out probability at key sharing and "
                        "masked upload (secure-sum: <= secagg-omega; mf: < secagg-omega)", check=unit_closed_left,
                        allowed="in [0, 1)"),
    "secagg-graph": Key("auto", str, "secure-sum and mf (lfl), secagg = 'protocol': masking graph, every client with "
                        "every other (Bonawitz et al.) or SecAgg+'s random Harary graph of degree k (Bell et al.); auto = "
                        "harary from 100 clients on (docs/secagg.md)", choices=GRAPHS),
    "secagg-corrupt": Key(CORRUPT_FRACTION, float, "secure-sum and mf (lfl), secagg = 'protocol': fraction γ of clients "
                          "that may collude with the honest-but-curious server; sets the Harary graph's (k, t)",
                          check=unit_closed_left, allowed="in [0, 1)"),
    "secagg-degree": Key(0, int, "secure-sum and mf (lfl), secagg-graph = 'harary': degree k override (even; 0 = the "
                         "smallest k meeting 2^-40 security and 2^-20 correctness, docs/secagg.md)",
                         check=lambda v: v >= 0 and v % 2 == 0, allowed="an even integer >= 0"),
    "secagg-threshold": Key(0, int, "secure-sum and mf (lfl), secagg-graph = 'harary': Shamir threshold t override "
                            "(0 = the smallest t meeting the bounds)", check=at_least(0), allowed=">= 0"),
})

#: The secure-sum task's own keys: its central guarantee of the whole run, its iterations and the vectors' L2 bound
#: (the common ``epsilon``, ``delta``, ``rounds`` and federated LDP-SGD's ``clip-norm`` are their old names,
#: :data:`fedpriv.config_aliases.RENAMED`).
SUM_KEYS: dict[str, Key] = {
    **in_table("privacy", {
        "run-epsilon": Key(1.0, float, "secure-sum: central ε of the whole run (σ calibrated once over sum-iterations "
                           "releases, RDP)", check=positive, allowed="> 0 and finite"),
        "run-delta": Key(1e-5, float, "secure-sum: central δ of the whole run", check=open_unit, allowed="in (0, 1)"),
    }),
    **in_table("secure_sum", {
        "sum-iterations": Key(30, int, "secure-sum: iterations T, each a two-round secure sum (key sharing, masked "
                              "upload) that releases one noisy sum", check=at_least(1), allowed=">= 1"),
        "sum-clip-norm": Key(1.0, float, "secure-sum: L2 bound C of each client's vector (the sum's sensitivity, "
                             "add/remove one client)", check=positive, allowed="> 0"),
    }),
}

#: The keys of the secure-sum task: secure aggregation, the users' vectors and its own keys.
SECURE_SUM = compose(SECAGG, MEAN_DATA, SUM_KEYS)


class SecureSumConfig(ConfigView):
    """The typed configuration of a secure-sum run."""

    KEYS = compose(common_keys("secure-sum"), SECURE_SUM)
