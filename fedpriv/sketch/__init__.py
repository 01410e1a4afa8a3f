"""DP Flajolet–Martin partition sketch (docs/vertical_kmeans.md §5, §6, §13).

* :mod:`~fedpriv.sketch.dpfm`: parameters (ε', n_p, α_min), the geometric map T, phantoms, registers;
* :mod:`~fedpriv.sketch.hashing`: the secret :class:`HashKey` and the keyed hash backends;
* :mod:`~fedpriv.sketch.partition`: MemEnc (DPFMPS-Gen), one party's ``(M, k')`` sketch;
* :mod:`~fedpriv.sketch.estimator`: cardinality estimators over M registers.
"""

from fedpriv.sketch.dpfm import (
    DpfmParams,
    dpfm_registers,
    geometric_transform,
    phantom_minima,
    register_cap,
)
from fedpriv.sketch.estimator import ESTIMATORS, cardinality, kappa
from fedpriv.sketch.hashing import (
    HASH_BACKENDS,
    HashKey,
    cluster_minima,
    keyed_uniforms,
)
from fedpriv.sketch.partition import partition_sketch

__all__ = [
    "ESTIMATORS",
    "HASH_BACKENDS",
    "DpfmParams",
    "HashKey",
    "cardinality",
    "cluster_minima",
    "dpfm_registers",
    "geometric_transform",
    "kappa",
    "keyed_uniforms",
    "partition_sketch",
    "phantom_minima",
    "register_cap",
]
