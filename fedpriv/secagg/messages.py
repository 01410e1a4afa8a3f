"""Public parameters and messages of the secure-aggregation protocol (docs/federated_mf.md §6.6), with their flat form.

Every message is a frozen dataclass carrying its ``instance`` (and, client → server, its
``sender``). ``to_dict`` gives a flat mapping whose values are ints, floats, bytes, lists of ints or
bytes (a Flower ``ConfigRecord``) or numpy arrays in their own keys (an ``ArrayRecord``);
``{id: bytes}`` maps travel as the parallel lists ``<name>-ids`` and ``<name>``. ``from_dict``
validates every field and raises :class:`~fedpriv.secagg.crypto.ProtocolViolation` on a malformed one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpriv._validation import check_int
from fedpriv.secagg import shamir
from fedpriv.secagg.crypto import ProtocolViolation
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import MaskingGraph
from fedpriv.secagg.signing import MAX_SIGNATURE_BYTES, config_digest

__all__ = [
    "ConsistencyMsg",
    "ConsistencyRequest",
    "InboxMsg",
    "KeysMsg",
    "MaskedMsg",
    "Message",
    "ProtocolConfig",
    "RosterMsg",
    "SharesMsg",
    "UnmaskMsg",
    "UnmaskRequest",
    "Value",
    "check_instance",
    "message_bytes",
    "pack_map",
    "read_field",
    "read_ids",
    "read_int",
    "read_list",
    "unpack_map",
]

Value = int | float | bytes | list[int] | list[bytes] | np.ndarray


# ----------------------------------------------------------------------------------------------
# flat (ConfigRecord-compatible) encoding helpers


def read_field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``d[key]`` after checking it is present and of ``kind`` (ProtocolViolation otherwise)."""
    if key not in d:
        raise ProtocolViolation(f"message field {key!r} is missing, got fields {sorted(d)}")
    value = d[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ProtocolViolation(f"message field {key!r} must be {kind}, got {type(value).__name__}")
    return value


def read_int(d: Mapping[str, Any], key: str) -> int:
    """A non-negative int field."""
    value = int(read_field(d, key, (int, np.integer)))
    if value < 0:
        raise ProtocolViolation(f"message field {key!r} must be >= 0, got {value}")
    return value


def read_list(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> list[Any]:
    """A list field whose items are all of ``kind``."""
    values = list(read_field(d, key, (list, tuple)))
    for v in values:
        if isinstance(v, bool) or not isinstance(v, kind):
            raise ProtocolViolation(f"message field {key!r} must hold {kind} items, got {type(v).__name__}")
    return values


def read_ids(d: Mapping[str, Any], key: str) -> tuple[int, ...]:
    """A list of distinct non-negative client ids."""
    ids = tuple(int(v) for v in read_list(d, key, (int, np.integer)))
    if any(v < 0 for v in ids) or len(set(ids)) != len(ids):
        raise ProtocolViolation(f"message field {key!r} must hold distinct client ids >= 0, got {list(ids)[:8]}")
    return ids


def pack_map(name: str, mapping: Mapping[int, bytes]) -> dict[str, Value]:
    """``{id: bytes}`` as the parallel lists ``<name>-ids`` and ``<name>`` (ids ascending)."""
    ids = sorted(mapping)
    return {f"{name}-ids": ids, name: [mapping[i] for i in ids]}


def unpack_map(d: Mapping[str, Any], name: str) -> dict[int, bytes]:
    """Inverse of :func:`pack_map`."""
    ids = read_ids(d, f"{name}-ids")
    values = read_list(d, name, (bytes, bytearray))
    if len(values) != len(ids):
        raise ProtocolViolation(f"message fields {name!r}-ids and {name!r} must have equal lengths, "
                            f"got {len(ids)} and {len(values)}")
    return {i: bytes(v) for i, v in zip(ids, values, strict=True)}


def check_instance(got: int, config: ProtocolConfig, what: str) -> None:
    """Refuse a message of another instance."""
    if got != config.instance:
        raise ProtocolViolation(f"{what} must be for instance {config.instance}, got instance {got} (replay?)")



# ----------------------------------------------------------------------------------------------
# configuration and messages


@dataclass(frozen=True)
class ProtocolConfig:
    """Public parameters of one protocol instance, known to the server and every client.

    Parameters
    ----------
    instance : int
        Distinct per instance in a run; bound into every message, key derivation and AEAD.
    roster : tuple of int
        Sorted, unique client ids invited; client ``roster[k]`` has Shamir point ``x = k + 1``.
    threshold : int
        ``t`` in ``[1, len(roster)]`` (``survivor_threshold(n, ω)`` at the caller): the instance
        halts when fewer clients are present at a step.
    dim : int
        Length of each report.
    codec : FixedPointCodec
        Encoding of reports into ``Z_M``; must fit ``len(roster)`` summands.
    graph : MaskingGraph or None (default: None)
        Who masks with whom (:mod:`fedpriv.secagg.graph`); ``None`` is the complete graph with
        secrets shared ``threshold``-of-n (Bonawitz et al. 2017).
    signed : bool (default: False)
        Every client must sign its advertised keys and the survivor set (:mod:`fedpriv.secagg.signing`);
        a server also runs a signed instance when some client signs of its own accord (its node's policy).
    """

    instance: int
    roster: tuple[int, ...]
    threshold: int
    dim: int
    codec: FixedPointCodec
    graph: MaskingGraph | None = None
    signed: bool = False
    _points: Mapping[int, int] = field(init=False, repr=False, compare=False)
    _neighbours: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_int(self.instance, "instance", minimum=0)
        roster = tuple(check_int(c, "roster entry", minimum=0) for c in self.roster)
        if not roster or any(a >= b for a, b in zip(roster, roster[1:])):
            raise ValueError(f"roster must be a non-empty, strictly increasing sequence of client ids, "
                             f"got {list(roster)[:8]}{'...' if len(roster) > 8 else ''}")
        if len(roster) >= shamir.PRIME - 1:
            raise ValueError(f"roster must have fewer than {shamir.PRIME - 1} clients, got {len(roster)}")
        object.__setattr__(self, "roster", roster)
        check_int(self.threshold, "threshold", minimum=1, maximum=len(roster))
        check_int(self.dim, "dim", minimum=1)
        if not isinstance(self.codec, FixedPointCodec):
            raise TypeError(f"codec must be a FixedPointCodec, got {type(self.codec).__name__}")
        self.codec.check_capacity(len(roster))
        graph = MaskingGraph.complete(len(roster), self.threshold) if self.graph is None else self.graph
        if not isinstance(graph, MaskingGraph):
            raise TypeError(f"graph must be a MaskingGraph or None, got {type(graph).__name__}")
        graph.check_roster(len(roster))
        if graph.kind == "complete" and graph.share_threshold != self.threshold:
            raise ValueError(f"graph.share_threshold must equal threshold = {self.threshold} for the complete graph "
                             f"(secrets shared t-of-n), got {graph.share_threshold}")
        object.__setattr__(self, "graph", graph)
        if not isinstance(self.signed, bool):
            raise TypeError(f"signed must be a bool, got {type(self.signed).__name__}")
        object.__setattr__(self, "_points", {c: k + 1 for k, c in enumerate(roster)})
        object.__setattr__(self, "_neighbours", {})

    @property
    def share_threshold(self) -> int:
        """``t`` of each client's Shamir sharing among itself and its neighbours."""
        return self.graph.share_threshold  # type: ignore[union-attr]

    @property
    def complete(self) -> bool:
        """Whether every client masks with every other client."""
        return self.graph.kind == "complete"  # type: ignore[union-attr]

    def point(self, client_id: int) -> int:
        """The Shamir evaluation point of ``client_id`` (its roster position + 1)."""
        if client_id not in self._points:
            raise ProtocolViolation(f"client id must be in the roster of instance {self.instance}, got {client_id}")
        return self._points[client_id]

    def points(self, client_ids: Sequence[int]) -> np.ndarray:
        """Shamir points of several clients (int64)."""
        return np.array([self.point(c) for c in client_ids], dtype=np.int64)

    def _positions(self) -> np.ndarray:
        """(n, k) roster positions of every client's neighbours (computed once; Harary only)."""
        table = self._neighbours.get("positions")
        if table is None:
            table = self.graph.neighbour_positions(len(self.roster), self.instance)  # type: ignore[union-attr]
            self._neighbours["positions"] = table
        return table

    def neighbours(self, client_id: int) -> tuple[int, ...]:
        """The sorted ids ``client_id`` agrees keys, shares and masks with (all others in the complete graph)."""
        row = self.point(client_id) - 1
        if self.complete:
            return self.roster[:row] + self.roster[row + 1:]
        return tuple(self.roster[p] for p in self._positions()[row])

    def ring_order(self) -> tuple[int, ...]:
        """The roster in ring order (roster order for the complete graph): neighbours are close in it."""
        ring = self.graph.ring(len(self.roster), self.instance)  # type: ignore[union-attr]
        return tuple(self.roster[p] for p in ring)

    def to_dict(self) -> dict[str, Value]:
        """Flat, ConfigRecord-compatible form (``signed`` only when set, so an unsigned config is what it was)."""
        return {"instance": self.instance, "roster": list(self.roster), "threshold": self.threshold,
                "dim": self.dim, "clip-range": self.codec.clip_range, "levels": self.codec.levels,
                "modulus-bits": self.codec.modulus_bits, **self.graph.to_dict(),  # type: ignore[union-attr]
                **({"signed": 1} if self.signed else {})}

    def digest(self) -> bytes:
        """SHA-256 of the config in canonical form: what every signature of the instance is bound to."""
        digest = self._neighbours.get("digest")
        if digest is None:
            digest = self._neighbours["digest"] = config_digest(self.to_dict())
        return digest

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProtocolConfig:
        """Inverse of :meth:`to_dict`."""
        codec = FixedPointCodec(clip_range=float(read_field(d, "clip-range", (int, float, np.floating))),
                                levels=read_int(d, "levels"), modulus_bits=read_int(d, "modulus-bits"))
        kind = read_field(d, "graph", str)
        if kind not in ("complete", "harary"):
            raise ProtocolViolation(f"message field 'graph' must be 'complete' or 'harary', got {kind!r}")
        graph = MaskingGraph(kind, read_int(d, "degree"), read_int(d, "share-threshold"), read_int(d, "graph-seed"))
        signed = read_int(d, "signed") if "signed" in d else 0
        if signed not in (0, 1):
            raise ProtocolViolation(f"message field 'signed' must be 0 or 1, got {signed}")
        return cls(instance=read_int(d, "instance"), roster=read_ids(d, "roster"), threshold=read_int(d, "threshold"),
                   dim=read_int(d, "dim"), codec=codec, graph=graph, signed=bool(signed))


@dataclass(frozen=True)
class KeysMsg:
    """Client → server, step *advertise*: the sender's two X25519 public keys, signed by its node key or not (b"")."""

    instance: int
    sender: int
    enc_public: bytes
    mask_public: bytes
    signature: bytes = b""

    def to_dict(self) -> dict[str, Value]:
        """Flat form (``signature`` only when signed)."""
        return {"instance": self.instance, "sender": self.sender,
                "enc-public": self.enc_public, "mask-public": self.mask_public,
                **({"signature": self.signature} if self.signature else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KeysMsg:
        """Inverse of :meth:`to_dict`."""
        return cls(read_int(d, "instance"), read_int(d, "sender"), bytes(read_field(d, "enc-public", (bytes, bytearray))),
                   bytes(read_field(d, "mask-public", (bytes, bytearray))), _signature(d, "signature"))


def _signature(d: Mapping[str, Any], key: str) -> bytes:
    """An optional signature field (b"" when absent), at most the length of an ECDSA P-384 signature."""
    if key not in d:
        return b""
    value = bytes(read_field(d, key, (bytes, bytearray)))
    if not 0 < len(value) <= MAX_SIGNATURE_BYTES:
        raise ProtocolViolation(f"message field {key!r} must be a signature of 1 to {MAX_SIGNATURE_BYTES} bytes, "
                            f"got {len(value)}")
    return value


@dataclass(frozen=True)
class RosterMsg:
    """Server → clients after *advertise*: ``{client id: (enc_public, mask_public)}`` of ``U1``, and in a signed
    instance each client's signature of its keys (``signatures``, relayed unchanged)."""

    instance: int
    keys: Mapping[int, tuple[bytes, bytes]]
    signatures: Mapping[int, bytes] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Value]:
        """Flat form: parallel lists ``keys-ids``, ``keys-enc-public``, ``keys-mask-public`` (and ``keys-signature``
        when signed)."""
        ids = sorted(self.keys)
        signed = {"keys-signature": [self.signatures.get(i, b"") for i in ids]} if self.signatures else {}
        return {"instance": self.instance, "keys-ids": ids,
                "keys-enc-public": [self.keys[i][0] for i in ids],
                "keys-mask-public": [self.keys[i][1] for i in ids], **signed}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RosterMsg:
        """Inverse of :meth:`to_dict`."""
        ids = read_ids(d, "keys-ids")
        enc = read_list(d, "keys-enc-public", (bytes, bytearray))
        mask = read_list(d, "keys-mask-public", (bytes, bytearray))
        sigs = read_list(d, "keys-signature", (bytes, bytearray)) if "keys-signature" in d else []
        if not len(ids) == len(enc) == len(mask) or (sigs and len(sigs) != len(ids)):
            raise ProtocolViolation(f"keys-ids, keys-enc-public, keys-mask-public (and keys-signature) must have equal "
                                f"lengths, got {len(ids)}, {len(enc)}, {len(mask)}, {len(sigs) if sigs else '-'}")
        keys = {i: (bytes(e), bytes(m)) for i, e, m in zip(ids, enc, mask, strict=True)}
        return cls(read_int(d, "instance"), keys, {i: bytes(s) for i, s in zip(ids, sigs, strict=False) if s})


@dataclass(frozen=True)
class SharesMsg:
    """Client → server, step *share*: one encrypted share pair per other client, and SHA-256(b_i)."""

    instance: int
    sender: int
    ciphertexts: Mapping[int, bytes]
    commitment: bytes

    def to_dict(self) -> dict[str, Value]:
        """Flat form."""
        return {"instance": self.instance, "sender": self.sender, **pack_map("ciphertexts", self.ciphertexts),
                "commitment": self.commitment}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SharesMsg:
        """Inverse of :meth:`to_dict`."""
        return cls(read_int(d, "instance"), read_int(d, "sender"), unpack_map(d, "ciphertexts"),
                   bytes(read_field(d, "commitment", (bytes, bytearray))))


@dataclass(frozen=True)
class InboxMsg:
    """Server → client ``i`` after *share*: ``{sender j: ciphertext addressed to i}`` over ``U2∖i``."""

    instance: int
    ciphertexts: Mapping[int, bytes]

    def to_dict(self) -> dict[str, Value]:
        """Flat form."""
        return {"instance": self.instance, **pack_map("ciphertexts", self.ciphertexts)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InboxMsg:
        """Inverse of :meth:`to_dict`."""
        return cls(read_int(d, "instance"), unpack_map(d, "ciphertexts"))


@dataclass(frozen=True)
class MaskedMsg:
    """Client → server, step *upload*: the masked encoded report (unsigned words, shape (dim,), values < M)."""

    instance: int
    sender: int
    masked: np.ndarray

    def to_dict(self) -> dict[str, Value]:
        """Flat form; ``masked`` is the only ndarray (ArrayRecord) value."""
        return {"instance": self.instance, "sender": self.sender, "masked": self.masked}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MaskedMsg:
        """Inverse of :meth:`to_dict` (the array is validated by the server, not here)."""
        return cls(read_int(d, "instance"), read_int(d, "sender"), read_field(d, "masked", np.ndarray))


@dataclass(frozen=True)
class ConsistencyRequest:
    """Server → uploaders after *upload* in a signed instance: the survivor set ``U3`` each is asked to sign."""

    instance: int
    survivors: tuple[int, ...]

    def to_dict(self) -> dict[str, Value]:
        """Flat form."""
        return {"instance": self.instance, "survivors": list(self.survivors)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConsistencyRequest:
        """Inverse of :meth:`to_dict`."""
        return cls(read_int(d, "instance"), tuple(sorted(read_ids(d, "survivors"))))


@dataclass(frozen=True)
class ConsistencyMsg:
    """Client → server, step *consistency*: the sender's signature of the survivor set it was sent."""

    instance: int
    sender: int
    signature: bytes

    def to_dict(self) -> dict[str, Value]:
        """Flat form."""
        return {"instance": self.instance, "sender": self.sender, "signature": self.signature}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConsistencyMsg:
        """Inverse of :meth:`to_dict`."""
        signature = _signature(d, "signature")
        if not signature:
            raise ProtocolViolation(f"message field 'signature' is missing, got fields {sorted(d)}")
        return cls(read_int(d, "instance"), read_int(d, "sender"), signature)


@dataclass(frozen=True)
class UnmaskRequest:
    """Server → uploaders after *upload*: who uploaded (``U3``) and who dropped after sharing (``U2∖U3``); in a
    signed instance also the consistency signatures the server collected (``{signer: signature of U3}``)."""

    instance: int
    uploaders: tuple[int, ...]
    dropped: tuple[int, ...]
    signatures: Mapping[int, bytes] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Value]:
        """Flat form (``signatures-ids``/``signatures`` only in a signed instance)."""
        signed = pack_map("signatures", self.signatures) if self.signatures else {}
        return {"instance": self.instance, "uploaders": list(self.uploaders), "dropped": list(self.dropped), **signed}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UnmaskRequest:
        """Inverse of :meth:`to_dict`."""
        signatures = unpack_map(d, "signatures") if "signatures-ids" in d else {}
        return cls(read_int(d, "instance"), read_ids(d, "uploaders"), read_ids(d, "dropped"), signatures)


@dataclass(frozen=True)
class UnmaskMsg:
    """Client → server, step *unmask*: shares of each uploader's ``b`` and each dropped client's mask key."""

    instance: int
    sender: int
    self_shares: Mapping[int, bytes]
    key_shares: Mapping[int, bytes]

    def to_dict(self) -> dict[str, Value]:
        """Flat form."""
        return {"instance": self.instance, "sender": self.sender,
                **pack_map("self-shares", self.self_shares), **pack_map("key-shares", self.key_shares)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UnmaskMsg:
        """Inverse of :meth:`to_dict`."""
        return cls(read_int(d, "instance"), read_int(d, "sender"), unpack_map(d, "self-shares"), unpack_map(d, "key-shares"))


Message = (KeysMsg | RosterMsg | SharesMsg | InboxMsg | MaskedMsg | ConsistencyRequest | ConsistencyMsg | UnmaskRequest
           | UnmaskMsg)


def message_bytes(msg: Message) -> int:
    """Payload size of a message: bytes values, array bytes, 8 bytes per int/float."""
    def size(v: Any) -> int:
        if isinstance(v, (bytes, bytearray)):
            return len(v)
        if isinstance(v, np.ndarray):
            return int(v.nbytes)
        if isinstance(v, (list, tuple)):
            if v and isinstance(v[0], (bytes, bytearray)):  # lists are flat and of one kind: bytes or ids
                return sum(map(len, v))
            return 8 * len(v)
        return 8
    return sum(size(v) for v in msg.to_dict().values())
