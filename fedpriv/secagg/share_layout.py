"""The layout and bindings of the two secrets secure aggregation shares (docs/federated_mf.md §6.6).

Each client holds a self-mask seed ``b_i`` and a mask private key, both :data:`SECRET_BYTES` long and
Shamir-shared as :data:`SECRET_LIMBS` field elements (:mod:`fedpriv.secagg.shamir`); a share pair
travels encrypted (:data:`CIPHERTEXT_BYTES`) with associated data binding it to its instance,
sender and recipient, and ``b_i`` is committed to by SHA-256 (Bonawitz et al. 2017, §4). The
protocol itself is :mod:`fedpriv.secagg.protocol`.
"""

from __future__ import annotations

import hashlib
import struct

from fedpriv.secagg import crypto, shamir

#: Length of the self-mask seed b_i and of an X25519 private key (the two shared secrets).
SECRET_BYTES = crypto.KEY_BYTES
#: Field elements per shared secret, and bytes of one serialized share of it.
SECRET_LIMBS = SECRET_BYTES * 8 // shamir.LIMB_BITS
SHARE_BYTES = SECRET_LIMBS * shamir.SHARE_WORD_BYTES
#: Length of an encrypted share pair (nonce + share of b_i + share of the mask key + tag).
CIPHERTEXT_BYTES = crypto.NONCE_BYTES + 2 * SHARE_BYTES + crypto.TAG_BYTES
_ENC_PURPOSE, _MASK_PURPOSE = b"share-encryption", b"pairwise-mask"
_AD_PREFIX, _AD_IDS = b"fedpriv/secagg/v1/shares|", struct.Struct(">QQQ")


def _ad(instance: int, sender: int, recipient: int) -> bytes:
    """AEAD associated data of an encrypted share pair: instance, sender, recipient (8 bytes each, big-endian)."""
    return _AD_PREFIX + _AD_IDS.pack(instance, sender, recipient)


def _commit(seed: bytes) -> bytes:
    """The commitment to a self-mask seed: SHA-256(b_i)."""
    return hashlib.sha256(seed).digest()
