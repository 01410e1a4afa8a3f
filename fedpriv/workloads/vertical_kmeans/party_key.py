"""The parties' shared secret and the per-repetition hash keys derived from it (docs/vertical_kmeans.md).

The DP Flajolet–Martin sketches of vertical k-means need a hash key K shared by the S data parties
and never by the server (docs/vertical_kmeans.md §5.5 R3, §18). The parties cannot talk to each other
(every message goes through the server), so K cannot be agreed on per run through the protocol;
instead every party holds the same **party key file**: 16 to 64 random bytes (32 when fedpriv
writes it), readable by its owner only (mode 0600), named in each party's node config under
:data:`HASH_KEY_FILE`. The server never gets the file, its path or its bytes.

From that one secret each party derives the hash key of repetition ``r`` of a run by HKDF-SHA256
(RFC 5869; ``cryptography``'s implementation)::

    K_r = HKDF-SHA256(ikm = file secret, salt = SALT, info = "config <digest>|repetition <r>", L = 32)

where ``<digest>`` is the run configuration's digest (``RunConfig.digest()``: every key the workload
reads, the seed included), which each party computes from its own configuration. HKDF is a PRF
keyed by the file secret, so the keys of distinct (configuration, repetition) pairs are
computationally independent uniform 32-byte strings — as independent as fresh ``os.urandom(32)``
keys, and every party derives the same K_r without a message. Repetitions stay independent, and two
experiments run with one key file never share a hash key unless their configurations are equal.

In process and under Flower's simulation engine the driver plays the part of the parties'
provisioning: it draws a fresh secret per run from the OS (:func:`new_key_secret`) and derives the
same K_r; under Flower it writes the secret to a key file in a private temporary directory, named in
the simulated nodes' node configs and removed when the run ends. A :class:`PartyKey` cannot be
printed, pickled or compared by value, like :class:`~fedpriv.sketch.hashing.HashKey`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, NoReturn

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedpriv._validation import check_int
from fedpriv.sketch.hashing import HashKey

__all__ = ["HASH_KEY_FILE", "KEY_BYTES", "KEY_FILE_NAME", "SALT", "PartyKey", "new_key_secret", "read_key_file",
           "write_key_file"]

#: Node-config key: path of the parties' key file (never in the run config, never sent to the server).
HASH_KEY_FILE = "hash-key-file"
#: File name of the parties' key file that the deployment's ``provision`` writes.
KEY_FILE_NAME = "vertical-kmeans-parties.key"
#: Bytes of secret fedpriv writes to a fresh key file.
KEY_BYTES = 32
#: HKDF salt: domain separation of fedpriv's vertical k-means hash keys (RFC 5869 §3.1).
SALT = b"fedpriv/vertical-kmeans/hash-key/v1"


def new_key_secret() -> bytes:
    """A fresh 32-byte secret for the parties' key from the OS CSPRNG (``os.urandom``)."""
    return os.urandom(KEY_BYTES)


class PartyKey:
    """The parties' shared secret (a key file's bytes); :meth:`repetition_key` derives each repetition's hash key.

    Like :class:`~fedpriv.sketch.hashing.HashKey` it is inert: ``repr`` shows no secret, it refuses
    to be pickled (it cannot ride in a message or a Ray payload by accident) and it is immutable.
    """

    __slots__ = ("_secret",)
    _secret: bytes

    def __init__(self, secret: bytes) -> None:
        HashKey(secret)  # the same checks: bytes, 16 to 64 of them
        object.__setattr__(self, "_secret", bytes(secret))

    def repetition_key(self, digest: str, repetition: int) -> HashKey:
        """The hash key K_r of repetition ``repetition`` (1-based) of the run whose config digest is ``digest``."""
        if not isinstance(digest, str) or not digest:
            raise ValueError(f"digest must be a run configuration's digest (a non-empty str), got {digest!r}")
        repetition = check_int(repetition, "repetition", minimum=1)
        info = f"config {digest}|repetition {repetition}".encode()
        return HashKey(HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=SALT, info=info).derive(self._secret))

    def __repr__(self) -> str:
        return "PartyKey(<secret>)"

    __str__ = __repr__

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("PartyKey is immutable")

    def __reduce__(self) -> NoReturn:
        raise TypeError("PartyKey cannot be pickled: the parties' secret stays on the parties' nodes (give each "
                        f"node the key file's path in its node config, {HASH_KEY_FILE!r})")


def write_key_file(path: str | os.PathLike[str], secret: bytes | None = None) -> Path:
    """Create the key file ``path`` (mode 0600, refusing an existing file) with ``secret`` (default: fresh)."""
    secret = new_key_secret() if secret is None else secret
    PartyKey(secret)
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def read_key_file(path: str | os.PathLike[str]) -> PartyKey:
    """The :class:`PartyKey` of the key file ``path``: 16 to 64 bytes, readable and writable by its owner only."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"node config {HASH_KEY_FILE} {str(path)!r} must be a regular file (the parties' key file)")
        secret = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"node config {HASH_KEY_FILE} {str(path)!r} cannot be read ({exc.strerror or exc}): give "
                         "each party the path of the parties' key file") from None
    if mode & 0o077:
        raise ValueError(f"the parties' key file {str(path)!r} must be readable by its owner only (mode 0600), got "
                         f"mode {stat.S_IMODE(mode):04o}: run chmod 600 on it")
    if not 16 <= len(secret) <= 64:
        raise ValueError(f"the parties' key file {str(path)!r} must hold 16 to 64 bytes of secret, got {len(secret)}")
    return PartyKey(secret)
