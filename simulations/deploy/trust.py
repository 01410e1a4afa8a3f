"""What a SuperNode trusts besides the SuperLink's certificate: the SuperExec's secret and the app signers.

* **SuperExec authentication** (flwr 1.39, marked experimental there): a SuperNode started with
  ``--isolation process --superexec-auth-secret-file F`` answers the Runtime API calls that hand
  out work (``AcquireTask``, ``PullPendingTasks``, ``ClaimTask``) only when they carry an HMAC keyed
  by the bytes of F; every other Runtime call needs the per-task token those calls hand out. The
  ``flower-superexec`` that starts the node's ClientApps is then a separate process given the same
  file. In Flower's default ``--isolation subprocess`` the node ignores the secret and starts its
  SuperExec without one (``flwr/supernode/start_client_internal.py``), so the flag alone protects
  nothing. :func:`generate_superexec_secret` writes 32 random bytes exclusively with mode 0600;
  :func:`check_superexec_secret` checks a file the operator gives.
* **Signed app bundles**: ``flower-supernode --trusted-entities FILE`` (a YAML mapping of public key
  ids to ``ssh-ed25519`` public keys) runs only FABs that carry a signature by one of those keys.
  :func:`check_trusted_entities` refuses before start what Flower would accept silently (an empty
  mapping, which turns verification off) or fail on with a traceback (a value that is not a string).
  In flwr 1.39 only apps fetched from Flower Hub carry signatures: a FAB submitted with
  ``flwr run <directory>`` carries none, and such a node refuses it (docs/deployment.md §10).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from fedpriv.private_files import write_private

__all__ = ["SECRET_BYTES", "check_superexec_secret", "check_trusted_entities", "generate_superexec_secret"]

#: Length of a generated SuperExec secret (HMAC-SHA256 key material).
SECRET_BYTES = 32
_SECRET_FIX = "make one with `head -c 32 /dev/urandom > FILE && chmod 600 FILE`"


def generate_superexec_secret(path: Path) -> Path:
    """Create ``path`` (exclusively, mode 0600) holding :data:`SECRET_BYTES` random bytes; returns it."""
    return write_private(Path(path), secrets.token_bytes(SECRET_BYTES), what="SuperExec secret")


def check_superexec_secret(path: Path) -> None:
    """Raise ``ValueError`` unless ``path`` is a non-empty regular file (not a link) readable by its owner only."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise ValueError(f"--superexec-auth-secret-file {path} cannot be read ({exc.strerror}): {_SECRET_FIX}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        raise ValueError(f"--superexec-auth-secret-file {path} must be a regular file, not a link or another kind of "
                         f"file: {_SECRET_FIX}")
    if info.st_size == 0:
        raise ValueError(f"--superexec-auth-secret-file {path} is empty (Flower reads its raw bytes as the secret): "
                         f"{_SECRET_FIX}")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ValueError(f"--superexec-auth-secret-file {path} is readable by other users (mode "
                         f"{stat.S_IMODE(info.st_mode):04o}); it must be 0600: `chmod 600 {path}`")


def check_trusted_entities(path: Path) -> dict[str, str]:
    """The ``--trusted-entities`` mapping (key id → ``ssh-ed25519`` key) of ``path``; ``ValueError`` naming a bad entry."""
    import yaml

    path = Path(path)
    form = ("a YAML mapping of public key ids to Ed25519 OpenSSH public keys, e.g. "
            "`fpk_1: \"ssh-ed25519 AAAA... signer\"`")
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"--trusted-entities {path} must be an existing regular file: {form}")
    try:
        entities = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"--trusted-entities {path} cannot be read as YAML ({exc}): it must be {form}") from None
    if not isinstance(entities, dict) or not entities:
        got = "an empty mapping (Flower would then verify nothing)" if entities == {} else type(entities).__name__
        raise ValueError(f"--trusted-entities {path} must be {form}, got {got}")
    for key_id, key in entities.items():
        if not isinstance(key_id, str) or not isinstance(key, str):
            raise ValueError(f"--trusted-entities {path}: entry {key_id!r} must map a string id to a string key "
                             f"(got {type(key).__name__}): it must be {form}")
        try:
            public = serialization.load_ssh_public_key(key.encode("utf-8"))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"--trusted-entities {path}: the key of {key_id!r} is not an OpenSSH public key ({exc})"
                             ) from None
        if not isinstance(public, ed25519.Ed25519PublicKey):
            raise ValueError(f"--trusted-entities {path}: the key of {key_id!r} is an {key.split()[0]} key, but "
                             "Flower verifies app signatures with ssh-ed25519 keys only (`ssh-keygen -t ed25519`)")
    return dict(entities)
