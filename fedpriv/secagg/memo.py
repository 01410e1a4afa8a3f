"""Work both simulated ends of a client pair would do alike, done once (in-process simulation only).

When one process simulates every client of an instance (:class:`~fedpriv.secagg.protocol.ProtocolAggregator`),
each pair ``(i, j)`` of neighbours would compute the same things twice:

* **Key agreement.** X25519 is symmetric (``X25519(a, B) = X25519(b, A)``) and the HKDF ``info`` names
  both clients in canonical order (:func:`fedpriv.secagg.crypto.pair_info`), so ``i`` and ``j``
  derive the same 32-byte key. :meth:`PairMemo.agree` keeps the key the first end derived, indexed by
  the ``info`` and both public keys, and hands it to the second end (then forgets it).
* **Pairwise masks.** ``i`` adds ``±PRG(s_ij)`` to its upload and ``j`` adds the opposite.
  :meth:`PairMemo.mask_sum` expands each pairwise seed once: the first end adds it to its own
  mask and to a pending sum kept for the other end, which uses that sum instead of expanding the
  same seeds again. A pending sum is used only if every seed in it equals the seed the second end
  derived itself for that neighbour; otherwise it is ignored and everything is expanded afresh.

Every client's upload is bit-identical to the one it computes alone (tests check this); only the
redundant second computation is skipped, which halves the two dominant costs of the protocol.
Pending sums are kept only for neighbours that will upload and have not yet, and only up to
``max_bytes`` (beyond that a client expands its masks itself): simulating clients in ring order
(:meth:`fedpriv.secagg.messages.ProtocolConfig.ring_order`) keeps O(k) of them alive for a Harary
graph. A memo belongs to one instance and one process: it holds secrets of every simulated
client, which is what an in-process simulation holds anyway; a deployed client never has one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from fedpriv._validation import check_int
from fedpriv.secagg import crypto

__all__ = ["PairMemo"]

#: Default cap on the memory of the pending mask sums (bytes).
MAX_PENDING_BYTES = 1 << 28


class PairMemo:
    """Key agreements and pairwise mask expansions shared by the two simulated ends of each pair.

    Parameters
    ----------
    dim : int
        Length of the masks (the instance's report length).
    dtype : numpy.uint32 or numpy.uint64 (default: uint64)
        The words of the instance's arithmetic (:meth:`fedpriv.secagg.encoding.FixedPointCodec.word_dtype`).
    max_bytes : int (default: 256 MiB)
        Cap on the memory of pending mask sums.
    """

    def __init__(self, dim: int, dtype: type[np.unsignedinteger] = np.uint64, *,
                 max_bytes: int = MAX_PENDING_BYTES) -> None:
        self.dim = check_int(dim, "dim", minimum=1)
        self.max_bytes = check_int(max_bytes, "max_bytes", minimum=0)
        self._keys: dict[tuple[bytes, bytes, bytes], bytes] = {}
        self._loaded: dict[bytes, Any] = {}  # parsed public keys, each client's parsed once
        self._uploaders: frozenset[int] = frozenset()
        self._done: set[int] = set()
        self._pending: dict[int, tuple[np.ndarray, dict[int, bytes]]] = {}
        self._expand = crypto.PrgExpander(self.dim, dtype)  # also checks dtype
        self.dtype = np.dtype(dtype)
        self.hits = {"agree": 0, "masks": 0}

    def agree(self, private: bytes, own_public: bytes, peer_publics: Sequence[bytes],
              infos: Sequence[bytes]) -> list[bytes]:
        """:func:`fedpriv.secagg.crypto.agree_many`, reusing a key the other end already derived."""
        out: list[bytes | None] = []
        misses = []
        for k, (peer, info) in enumerate(zip(peer_publics, infos, strict=True)):
            key = self._keys.pop((info, own_public, peer) if own_public < peer else (info, peer, own_public), None)
            out.append(key)
            if key is None:
                misses.append(k)
        self.hits["agree"] += len(out) - len(misses)
        fresh = crypto.agree_many(private, [peer_publics[k] for k in misses], infos=[infos[k] for k in misses],
                                  loaded=self._loaded)
        for k, key in zip(misses, fresh, strict=True):
            out[k] = key
            peer = peer_publics[k]
            self._keys[(infos[k], own_public, peer) if own_public < peer else (infos[k], peer, own_public)] = key
        return out  # type: ignore[return-value]

    def expect_uploaders(self, ids: Collection[int]) -> None:
        """The clients that will call :meth:`mask_sum` (only they get pending sums)."""
        self._uploaders = frozenset(int(c) for c in ids)

    def mask_sum(self, me: int, own: Sequence[bytes], peers: Sequence[int], seeds: Sequence[bytes],
                 signs: Sequence[int]) -> np.ndarray:
        """``Σ_own PRG(s) + Σ_k signs[k]·PRG(seeds[k])`` (wrapping words) for client ``me``."""
        mine = dict(zip(peers, seeds, strict=True))
        used: set[int] = set()
        pending = self._pending.pop(me, None)
        if pending is not None and all(mine.get(p) == s for p, s in pending[1].items()):
            total = pending[0]  # the memo's own array: start from it
            used = set(pending[1])
            self.hits["masks"] += len(used)
        else:
            total = np.zeros(self.dim, dtype=self.dtype)
        self._done.add(me)
        for seed in own:
            np.add(total, self._expand(seed), out=total)
        for peer, seed, sign in zip(peers, seeds, signs, strict=True):
            if peer in used:
                continue
            mask = self._expand(seed)
            (np.add if sign > 0 else np.subtract)(total, mask, out=total)
            if peer in self._uploaders and peer not in self._done:  # the peer adds the opposite sign
                slot = self._pending.get(peer)
                if slot is not None:
                    (np.subtract if sign > 0 else np.add)(slot[0], mask, out=slot[0])
                    slot[1][me] = seed
                elif (len(self._pending) + 1) * mask.nbytes <= self.max_bytes:
                    self._pending[peer] = (np.negative(mask) if sign > 0 else mask.copy(), {me: seed})
        return total
