"""MemEnc = DPFMPS-Gen: the DP Flajolet–Martin partition sketch of one party (docs/vertical_kmeans.md §6, §5.4).

Guarantees
----------
:func:`partition_sketch` encodes a party's local partition (one cluster label per id) as an
``(M, k)`` integer array ``A`` with ``A[i, a] = DPFM(M_a, ε', γ, ζ_i)``: the register of cluster a
under hash key i, with fresh phantoms and the floor α_min. A user belongs to exactly one cluster,
so each row is ε'-DP (parallel composition, Lemma 7) and the M rows are (ε_2, δ_2)-DP together
(Theorem 5.3.1), given an ideal hash whose key K is secret from the server and phantom randomness
that is local to the party. Only the integer registers leave this function: the continuous minima
of the keyed uniforms stay inside it (§5.4). Registers of the same key are mergeable: the sketch of a
union is the element-wise maximum (exactly, in non-private mode).

The cluster labels come from the party's DP local centers (nearest center, ties to the lowest index,
§6); computing them is post-processing and happens in the caller.
"""

from __future__ import annotations

import numpy as np

from fedpriv._validation import check_rng
from fedpriv.sketch.dpfm import DpfmParams, dpfm_registers
from fedpriv.sketch.hashing import HashKey, cluster_minima

__all__ = ["partition_sketch"]


def partition_sketch(ids: np.ndarray, labels: np.ndarray, k: int, key: HashKey, params: DpfmParams,
                     rng: np.random.Generator, *, backend: str = "prf") -> np.ndarray:
    """MemEnc (§6): ``(M, k)`` registers ``max(T(min(u_min, V)), α_min)`` of ``params.register_dtype``.

    ``ids`` are the party's user ids (non-negative integers, the same at every party), ``labels``
    their local cluster in [0, k − 1], ``key`` the parties' shared secret, ``rng`` party-local
    randomness for the phantoms (e.g. ``fedpriv.rng.stream(run_seed, 0, party, "phantoms")``).
    ``backend="datasketch"`` does not give independent repetitions (A9): mark such runs.
    """
    if not isinstance(params, DpfmParams):
        raise TypeError(f"params must be a DpfmParams, got {type(params).__name__}")
    check_rng(rng)
    u_min = cluster_minima(key, ids, labels, k, params.M, backend=backend)
    return dpfm_registers(u_min, params, rng)
