"""Secure aggregation of Bonawitz et al. 2017 over a complete or SecAgg+ sparse graph (honest-but-curious), docs/federated_mf.md §6.6.

The protocol is written as two pure state machines that exchange frozen message dataclasses, so the
same code runs in-process (:class:`ProtocolAggregator`) and behind Flower messages (each message's
``to_dict``/``from_dict`` is ConfigRecord/ArrayRecord-compatible). The masking graph
(:mod:`fedpriv.secagg.graph`, in :class:`ProtocolConfig`) says who a client works with: everyone
(complete graph) or its ``k`` neighbours in a random Harary graph (SecAgg+, Bell et al. 2020).
``N(i)`` below is client ``i``'s neighbours and ``t`` the Shamir threshold of the graph.

1. *advertise* — every client sends two X25519 public keys (share encryption, mask agreement);
   the server needs ``⌈(1−ω)n⌉`` of them and tells each client the keys of its neighbours in ``U1``
   (:class:`KeysMsg` → one :class:`RosterMsg` per client).
2. *share* — client ``i`` draws a self-mask seed ``b_i``, Shamir-shares ``b_i`` and its mask
   private key ``t``-of-``|{i} ∪ N(i) ∩ U1|`` and sends each neighbour its share pair, encrypted with
   ChaCha20-Poly1305 under ``agree(enc_i, enc_j)`` and relayed by the server; it also sends a
   SHA-256 commitment to ``b_i`` (:class:`SharesMsg` → :class:`InboxMsg`). Share set ``U2``.
3. *upload* — ``y_i = encode(x_i) + PRG(b_i) + Σ_{j∈N(i)∩U2} ±PRG(s_ij) mod M`` with ``+`` if
   ``i < j``, ``−`` if ``i > j`` and ``s_ij = agree(mask_i, mask_j)`` (:class:`MaskedMsg`).
   The server validates each upload (length, dtype, value < M); a bad one is rejected and its
   sender counts as dropped. Uploaders ``U3``.
4. *unmask* — each uploader sends, of the clients whose shares it holds, its share of ``b_u`` for
   every ``u ∈ U3`` and its share of the mask key of every ``d ∈ U2∖U3`` — never both for one
   client (:class:`UnmaskRequest` → :class:`UnmaskMsg`). From ``t`` holders per secret the server
   rebuilds those secrets (checking the commitment of each ``b_u`` and that each rebuilt mask key
   matches its advertised public key), removes the masks and decodes ``Σ_{U3} x_u``
   (:meth:`FixedPointCodec.decode_sum`).

Fewer than ``⌈(1−ω)n⌉`` clients at any step halts the instance (:class:`SecAggHalted`, docs/federated_mf.md §9
A20), whatever the graph. In a sparse graph the instance also halts, releasing nothing, when some
client's secret is left with fewer than ``t`` share holders (probability below ``2^−η`` by the
choice of ``(k, t)``, :mod:`fedpriv.secagg.bounds`).

Guarantees and their assumptions (:class:`~fedpriv.secagg.graph.SecAggGuarantee`): the server learns
only the sum over ``U3`` and who was present at each step, provided it follows the protocol
(honest-but-curious) and at most ``⌊γn⌋`` clients collude with it — fewer than ``t`` for the complete
graph (Bonawitz et al. 2017, Thm. 6.3), except with probability ``2^−σ`` for the Harary graph
(Bell et al. 2020). Against an *active* server the instance must be **signed**
(:mod:`fedpriv.secagg.signing`, Bonawitz et al.'s actively secure variant): each client signs its
advertised keys with its node key and the others verify them against their peers table, and
between *upload* and *unmask* a **consistency check** runs — every uploader signs the survivor set
``U3`` it is sent (:class:`ConsistencyRequest` → :class:`ConsistencyMsg`), and a verifying client
reveals shares only for an unmask request that splits its share holders by that set and carries
``≥ t`` signatures of it that verify. Unsigned, the protocol is secure against an
honest-but-curious server only. Every message and every derived key is bound to
``instance``: a message of another instance is refused and a ciphertext replayed across instances
fails authentication. Secrets come from the OS CSPRNG (:func:`fedpriv.secagg.crypto.random_bytes`);
only the stochastic rounding of the encoding uses a keyed stream
(``stream(seed, instance, client, "secagg-rounding")``) and the Harary graph the public
``stream(seed, instance, SERVER, "secagg-graph")``.
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from fedpriv._validation import as_real_array, check_int
from fedpriv.rng import stream
from fedpriv.secagg import crypto, shamir
from fedpriv.secagg.base import (
    STAGES,
    AggregationResult,
    DropoutModel,
    SecAggHalted,
    SecureAggregator,
    check_reports,
)
from fedpriv.secagg.crypto import ProtocolViolation, ShareAuthenticationError
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import GraphPolicy, SecAggGuarantee
from fedpriv.secagg.memo import PairMemo
from fedpriv.secagg.messages import (
    ConsistencyMsg,
    ConsistencyRequest,
    InboxMsg,
    KeysMsg,
    MaskedMsg,
    ProtocolConfig,
    RosterMsg,
    SharesMsg,
    UnmaskMsg,
    UnmaskRequest,
    Value,
    check_instance,
    message_bytes,
    pack_map,
    read_field,
    read_ids,
    read_int,
    unpack_map,
)
from fedpriv.secagg.signing import PeerKeys, SignatureError, Signer, keys_payload, survivors_payload

__all__ = [
    "ConsistencyMsg",
    "ConsistencyRequest",
    "InboxMsg",
    "KeysMsg",
    "MaskedMsg",
    "ProtocolAggregator",
    "ProtocolConfig",
    "ProtocolViolation",
    "RosterMsg",
    "SecAggClient",
    "SecAggServer",
    "ShareAuthenticationError",
    "SharesMsg",
    "SignatureError",
    "UnmaskMsg",
    "UnmaskRequest",
    "ROUNDING_PURPOSE",
    "message_bytes",
    "rounding_stream",
    "stages",
]

#: Purpose of the keyed stream behind a client's stochastic rounding (the only keyed randomness here).
ROUNDING_PURPOSE = "secagg-rounding"


def rounding_stream(seed: int, instance: int, client_id: int) -> np.random.Generator:
    """Client ``client_id``'s stochastic-rounding stream in ``instance``: the same in every runtime."""
    return stream(seed, instance, client_id, ROUNDING_PURPOSE)


#: Length of the self-mask seed b_i and of an X25519 private key (the two shared secrets).
SECRET_BYTES = crypto.KEY_BYTES
#: Field elements per shared secret, and bytes of one serialized share of it.
SECRET_LIMBS = SECRET_BYTES * 8 // shamir.LIMB_BITS
SHARE_BYTES = SECRET_LIMBS * shamir.SHARE_WORD_BYTES
#: Length of an encrypted share pair (nonce + share of b_i + share of the mask key + tag).
CIPHERTEXT_BYTES = crypto.NONCE_BYTES + 2 * SHARE_BYTES + crypto.TAG_BYTES
_ENC_PURPOSE, _MASK_PURPOSE = b"share-encryption", b"pairwise-mask"
_AD_PREFIX, _AD_IDS = b"fedpriv/secagg/v1/shares|", struct.Struct(">QQQ")


class _Sent(Protocol):
    """A client → server message: it names its instance and its sender."""

    @property
    def instance(self) -> int: ...

    @property
    def sender(self) -> int: ...


_M = TypeVar("_M", bound=_Sent)


def _ad(instance: int, sender: int, recipient: int) -> bytes:
    """AEAD associated data of an encrypted share pair: instance, sender, recipient (8 bytes each, big-endian)."""
    return _AD_PREFIX + _AD_IDS.pack(instance, sender, recipient)


def _commit(seed: bytes) -> bytes:
    """The commitment to a self-mask seed: SHA-256(b_i)."""
    return hashlib.sha256(seed).digest()


def stages(signed: bool) -> tuple[str, ...]:
    """The steps of an instance in order: :data:`~fedpriv.secagg.base.STAGES`, with ``"consistency"`` before
    ``"unmask"`` in a signed one."""
    return ("advertise", "share", "upload", "consistency", "unmask") if signed else STAGES


# ----------------------------------------------------------------------------------------------
# client


class SecAggClient:
    """One client's side of an instance: a state machine advertise → share_keys → masked_input → unmask.

    Each step runs once and in order (a repeated or out-of-order call raises :class:`ProtocolViolation`).
    Key pairs and the self-mask seed come from the OS CSPRNG at construction. Between messages the
    whole state can be saved with :meth:`state_dict` and restored with :meth:`from_state_dict`.

    Against an active server (:mod:`fedpriv.secagg.signing`): with a ``signer`` the client signs its
    advertised keys and, when asked (:meth:`consistency`, between ``masked_input`` and ``unmask``), the
    survivor set; with ``peers`` it also verifies every roster key's signature and, before it reveals
    any share, ``≥ threshold`` signatures over the survivor set it signed itself — a client that
    verifies never unmasks without the consistency check. ``config.signed`` requires a signer.
    """

    _STEPS: ClassVar[tuple[str, ...]] = ("advertise", "share_keys", "masked_input", "unmask", "done")

    def __init__(self, client_id: int, config: ProtocolConfig, *, memo: PairMemo | None = None,
                 signer: Signer | None = None, peers: PeerKeys | None = None) -> None:
        if not isinstance(config, ProtocolConfig):
            raise TypeError(f"config must be a ProtocolConfig, got {type(config).__name__}")
        if memo is not None and not isinstance(memo, PairMemo):
            raise TypeError(f"memo must be a PairMemo or None, got {type(memo).__name__}")
        self.config = config
        self.client_id = check_int(client_id, "client_id", minimum=0)
        config.point(self.client_id)  # must be in the roster
        self._memo = memo
        self._signing(signer, peers)
        self._enc_private, self._enc_public = crypto.generate_keypair()
        self._mask_private, self._mask_public = crypto.generate_keypair()
        self._seed = crypto.random_bytes(SECRET_BYTES)
        self._stage = 0
        self._keys: dict[int, tuple[bytes, bytes]] = {}  # U1's public keys, from the roster message
        self._enc_keys: dict[int, bytes] = {}  # agree(enc_i, enc_j), reused to decrypt the inbox
        self._share_ids: tuple[int, ...] = ()  # U2 (own id included), ascending
        self._shares = np.empty((0, 2 * SECRET_LIMBS), dtype=np.int64)  # row k: shares held of client k
        self._survivors: tuple[int, ...] | None = None  # U3 as this client signed it (consistency check)

    def _signing(self, signer: Signer | None, peers: PeerKeys | None) -> None:
        """Keep the client's signer and peers table after checking they fit the instance."""
        if signer is not None and not isinstance(signer, Signer):
            raise TypeError(f"signer must be a fedpriv.secagg.signing.Signer or None, got {type(signer).__name__}")
        if peers is not None and not isinstance(peers, PeerKeys):
            raise TypeError(f"peers must be a fedpriv.secagg.signing.PeerKeys or None, got {type(peers).__name__}")
        if signer is None and (peers is not None or self.config.signed):
            raise ProtocolViolation(f"client {self.client_id} needs a signing key: "
                                f"{'the instance is signed' if self.config.signed else 'it verifies its peers'}")
        self._signer, self._peers = signer, peers

    def __repr__(self) -> str:
        return f"SecAggClient(client_id={self.client_id}, instance={self.config.instance}, " \
               f"next={self._STEPS[self._stage]!r})"

    def _begin(self, step: str, instance: int) -> None:
        """Refuse a step run twice or out of order, or a message of another instance."""
        expected = self._STEPS[self._stage]
        if step != expected:
            raise ProtocolViolation(f"client {self.client_id}: step {step!r} is out of order or replayed; "
                                f"the next step must be {expected!r}")
        check_instance(instance, self.config, f"message to client {self.client_id}")

    def advertise(self) -> KeysMsg:
        """Step 1: this client's public keys (signed with its node key when it has a signer)."""
        self._begin("advertise", self.config.instance)
        self._stage += 1
        cfg, me = self.config, self.client_id
        signature = b"" if self._signer is None else self._signer.sign(
            keys_payload(cfg.digest(), cfg.instance, me, self._enc_public, self._mask_public))
        return KeysMsg(cfg.instance, me, self._enc_public, self._mask_public, signature)

    def _verify_keys(self, roster: RosterMsg) -> None:
        """Refuse a roster key whose signature does not verify against its client's key in the peers table."""
        if self._peers is None:
            return
        cfg, me = self.config, self.client_id
        unknown = self._peers.missing(roster.keys)
        if unknown:
            raise SignatureError(f"roster of client {me} lists clients {unknown[:8]} that are not in this node's "
                                 f"peers table ({self._peers.source})")
        for j in sorted(roster.keys):
            enc, mask = roster.keys[j]
            if not self._peers.verify(j, roster.signatures.get(j, b""), keys_payload(cfg.digest(), cfg.instance, j,
                                                                                      enc, mask)):
                raise SignatureError(
                    f"the advertised keys of client {j} in client {me}'s roster "
                    f"{'carry no signature' if j not in roster.signatures else 'do not verify'} against client "
                    f"{j}'s key in this node's peers table: the server (or the network) substituted them, or sent "
                    f"the clients different instance configs")

    def share_keys(self, roster: RosterMsg) -> SharesMsg:
        """Step 2: Shamir-share ``b_i`` and the mask private key among itself and its neighbours in ``U1``.

        The shares go ``t``-of-``(k+1)`` (``t = config.share_threshold``), each encrypted for its
        recipient; the complete graph's neighbours are all of ``U1``.
        """
        self._begin("share_keys", roster.instance)
        cfg, me = self.config, self.client_id
        keys = dict(roster.keys)
        if keys.get(me) != (self._enc_public, self._mask_public):
            raise ProtocolViolation(f"roster must list client {me}'s own advertised keys unchanged")
        self._verify_keys(roster)
        strangers = sorted(set(keys) - {me, *cfg.neighbours(me)})
        if strangers:
            raise ProtocolViolation(f"roster of client {me} must list only itself and its neighbours in the masking "
                                f"graph, got clients {strangers[:8]}")
        if len(keys) < cfg.share_threshold:
            raise ProtocolViolation(f"roster must have at least threshold = {cfg.share_threshold} clients (itself and "
                                f"its neighbours), got {len(keys)}")
        flat = [k for pair in keys.values() for k in pair]
        if any(not isinstance(k, bytes) or len(k) != crypto.KEY_BYTES for k in flat) or len(set(flat)) != len(flat):
            raise ProtocolViolation("roster public keys must be distinct 32-byte X25519 keys")
        ids = sorted(keys)
        points = cfg.points(ids)  # also refuses ids outside the roster
        shares = shamir.split(self._seed + self._mask_private, threshold=cfg.share_threshold, xs=points)
        others = [j for j in ids if j != me]
        self._enc_keys = dict(zip(others, self._agree(self._enc_private, _ENC_PURPOSE, others, keys, 0), strict=True))
        plain = shares.astype(">u4")
        ciphertexts = {j: crypto.encrypt(self._enc_keys[j], plain[row].tobytes(), _ad(cfg.instance, me, j))
                       for row, j in enumerate(ids) if j != me}  # one AEAD per recipient (inherent)
        self._keys = keys
        self._share_ids = (me,)
        self._shares = shares[ids.index(me)][None, :]
        self._stage += 1
        return SharesMsg(cfg.instance, me, ciphertexts, _commit(self._seed))

    def masked_input(self, x: np.ndarray, inbox: InboxMsg, rng: np.random.Generator) -> MaskedMsg:
        """Step 3: store the shares received and upload ``encode(x) + PRG(b_i) + Σ ±PRG(s_ij) mod M``."""
        self._begin("masked_input", inbox.instance)
        cfg, me = self.config, self.client_id
        arr = as_real_array(x, "x")
        if arr.shape != (cfg.dim,):
            raise ValueError(f"x must have shape (dim,) = ({cfg.dim},), got {arr.shape}")
        encoded = cfg.codec.encode(arr, rng)  # overflow raises before any share is consumed
        senders = sorted(inbox.ciphertexts)
        unknown = [j for j in senders if j == me or j not in self._keys]
        if unknown:
            raise ProtocolViolation(f"inbox of client {me} must hold ciphertexts from other members of U1, "
                                f"got senders {unknown[:8]}")
        if len(senders) + 1 < cfg.share_threshold:
            raise ProtocolViolation(f"inbox of client {me} must come from at least threshold - 1 = "
                                f"{cfg.share_threshold - 1} senders, got {len(senders)}")
        plains = [crypto.decrypt(self._enc_keys[j], inbox.ciphertexts[j], _ad(cfg.instance, j, me)) for j in senders]
        bad = [j for j, p in zip(senders, plains, strict=True) if len(p) != 2 * SHARE_BYTES]
        if bad:
            raise ProtocolViolation(f"share pair from client {bad[0]} to client {me} is malformed: it must be "
                                f"{2 * SHARE_BYTES} bytes")
        try:
            received = shamir.shares_from_bytes(b"".join(plains), count=len(senders), limbs=2 * SECRET_LIMBS)
        except ValueError as exc:
            raise ProtocolViolation(f"a share pair sent to client {me} is malformed: {exc}") from exc
        share_ids = sorted([*senders, me])
        shares = np.empty((len(share_ids), 2 * SECRET_LIMBS), dtype=np.int64)
        mine = share_ids.index(me)
        shares[mine] = self._shares[0]
        shares[np.arange(len(share_ids)) != mine] = received  # senders and share_ids are both ascending
        # §6.6 step 3: + PRG(s_ij) if i < j, − PRG(s_ij) if i > j, plus the self mask PRG(b_i)
        others = [j for j in share_ids if j != me]
        seeds = self._agree(self._mask_private, _MASK_PURPOSE, others, self._keys, 1)
        if self._memo is None:
            mask = crypto.prg_sum([self._seed, *(s for j, s in zip(others, seeds) if j > me)],
                                  [s for j, s in zip(others, seeds) if j < me], cfg.dim, bits=cfg.codec.modulus_bits)
        else:
            mask = self._memo.mask_sum(me, [self._seed], others, seeds, [1 if j > me else -1 for j in others])
        masked = (encoded + mask) & cfg.codec.word_dtype(cfg.codec.modulus - 1)
        self._share_ids, self._shares = tuple(share_ids), shares
        self._stage += 1
        return MaskedMsg(cfg.instance, me, masked)

    def _agree(self, private: bytes, purpose: bytes, peers: Sequence[int],
               keys: Mapping[int, tuple[bytes, bytes]], which: int) -> list[bytes]:
        """Pairwise keys of this client with ``peers`` (``which``: 0 = encryption keys, 1 = mask keys)."""
        infos = [crypto.pair_info(purpose, self.config.instance, self.client_id, j) for j in peers]
        publics = [keys[j][which] for j in peers]
        if self._memo is None:
            return crypto.agree_many(private, publics, infos=infos)
        return self._memo.agree(private, keys[self.client_id][which], publics, infos)

    def consistency(self, request: ConsistencyRequest) -> ConsistencyMsg:
        """The consistency check (Bonawitz et al. 2017, round ConsistencyCheck): sign the survivor set ``U3``.

        The set must hold this client, at least ``threshold`` clients of the roster, and every
        neighbour this client holds shares of that the set names must have shared with it (``U3 ⊆ U2``).
        """
        self._begin("unmask", request.instance)
        cfg, me = self.config, self.client_id
        if self._signer is None:
            raise ProtocolViolation(f"client {me} has no signing key: it takes part in no consistency check")
        if self._survivors is not None:
            raise ProtocolViolation(f"client {me}: the consistency check is replayed; it signs one survivor set per "
                                "instance")
        survivors = tuple(sorted(request.survivors))
        if me not in survivors:
            raise ProtocolViolation(f"survivor set must list client {me} (it uploaded)")
        roster = set(cfg.roster)
        strangers = [c for c in survivors if c not in roster]
        if strangers:
            raise ProtocolViolation(f"survivor set must hold roster clients only, got {strangers[:8]}")
        if len(survivors) < cfg.threshold:
            raise ProtocolViolation(f"survivor set must hold at least threshold = {cfg.threshold} clients, got "
                                f"{len(survivors)}")
        mine = {me, *cfg.neighbours(me)}
        unshared = sorted(c for c in survivors if c in mine and c not in set(self._share_ids))
        if unshared:
            raise ProtocolViolation(f"survivor set names clients {unshared[:8]} that sent client {me} no shares (U3 must "
                                "be within U2)")
        self._survivors = survivors
        return ConsistencyMsg(cfg.instance, me, self._signer.sign(survivors_payload(cfg.digest(), cfg.instance,
                                                                                    survivors)))

    def _check_consistency(self, request: UnmaskRequest, held: set[int]) -> None:
        """Before any share leaves: the request agrees with the survivor set this client signed, and (with peers)
        carries ``≥ threshold`` signatures of it that verify."""
        cfg, me = self.config, self.client_id
        if self._survivors is None:
            if self._peers is not None or cfg.signed:
                raise ProtocolViolation(f"client {me} reveals shares only after the consistency check (it verifies "
                                    "its peers): the unmask request came without it")
            return
        survivors = set(self._survivors)
        if set(request.uploaders) != held & survivors or set(request.dropped) != held - survivors:
            raise ProtocolViolation(f"unmask request to client {me} must split its share holders by the survivor set it "
                                f"signed: uploaders {sorted(held & survivors)[:8]}, dropped "
                                f"{sorted(held - survivors)[:8]}; got uploaders {list(request.uploaders)[:8]}, "
                                f"dropped {list(request.dropped)[:8]}")
        if self._peers is None:
            return
        outside = sorted(set(request.signatures) - survivors)
        if outside:
            raise SignatureError(f"consistency signatures must come from survivors, got clients {outside[:8]}")
        payload = survivors_payload(cfg.digest(), cfg.instance, self._survivors)
        bad = [c for c in sorted(request.signatures) if not self._peers.verify(c, request.signatures[c], payload)]
        if bad:
            raise SignatureError(f"the consistency signatures of clients {bad[:8]} do not verify over the survivor "
                                 f"set client {me} signed: the server sent different survivor sets to different "
                                 "clients (or substituted signatures); no share is revealed")
        if len(request.signatures) < cfg.threshold:
            raise SignatureError(f"unmask request to client {me} carries {len(request.signatures)} consistency "
                                 f"signatures over the survivor set it signed; it needs threshold t = "
                                 f"{cfg.threshold}: no share is revealed")

    def unmask(self, request: UnmaskRequest) -> UnmaskMsg:
        """Step 4: the share of ``b_u`` for each uploader and of the mask key of each dropped client."""
        self._begin("unmask", request.instance)
        cfg, me = self.config, self.client_id
        uploaders, dropped = set(request.uploaders), set(request.dropped)
        both = sorted(uploaders & dropped)
        if both:
            raise ProtocolViolation(f"unmask request must not list a client as both uploader and dropped, got {both[:8]}")
        held = set(self._share_ids)
        self._check_consistency(request, held)
        if uploaders | dropped != held:
            raise ProtocolViolation(
                f"unmask request must partition client {me}'s share set U2 ({len(held)} clients): "
                f"outside it {sorted((uploaders | dropped) - held)[:8]}, missing {sorted(held - uploaders - dropped)[:8]}"
            )
        if len(uploaders) < cfg.share_threshold:
            raise ProtocolViolation(f"unmask request must list at least threshold = {cfg.share_threshold} uploaders, "
                                f"got {len(uploaders)}")
        if me not in uploaders:
            raise ProtocolViolation(f"unmask request must list client {me} among the uploaders (it uploaded)")
        rows = {j: k for k, j in enumerate(self._share_ids)}
        self_shares = self._share_bytes(sorted(uploaders), rows, slice(0, SECRET_LIMBS))
        key_shares = self._share_bytes(sorted(dropped), rows, slice(SECRET_LIMBS, 2 * SECRET_LIMBS))
        self._stage += 1
        return UnmaskMsg(cfg.instance, me, self_shares, key_shares)

    def _share_bytes(self, owners: list[int], rows: Mapping[int, int], part: slice) -> dict[int, bytes]:
        """The held shares of ``owners`` (one secret each: ``part`` of the share pair) as bytes, by owner."""
        raw = self._shares[[rows[o] for o in owners], part].astype(">u4").tobytes()
        size = SHARE_BYTES
        return {o: raw[k * size:(k + 1) * size] for k, o in enumerate(owners)}

    def state_dict(self) -> dict[str, Value]:
        """Everything needed to resume between messages (contains private keys: keep it on the device)."""
        ids = sorted(self._keys)
        return {
            "client-id": self.client_id, "instance": self.config.instance, "stage": self._stage,
            "enc-private": self._enc_private, "mask-private": self._mask_private, "self-mask-seed": self._seed,
            "keys-ids": ids, "keys-enc-public": [self._keys[i][0] for i in ids],
            "keys-mask-public": [self._keys[i][1] for i in ids],
            **pack_map("enc-keys", self._enc_keys),
            "share-ids": list(self._share_ids), "shares": self._shares.astype(">u4").tobytes(),
            **({} if self._survivors is None else {"survivors": list(self._survivors)}),
        }

    @classmethod
    def from_state_dict(cls, config: ProtocolConfig, state: Mapping[str, Any], *, memo: PairMemo | None = None,
                        signer: Signer | None = None, peers: PeerKeys | None = None) -> SecAggClient:
        """Rebuild a client saved by :meth:`state_dict` (checks it belongs to ``config``'s instance); ``memo``,
        ``signer`` and ``peers`` as in the constructor."""
        if memo is not None and not isinstance(memo, PairMemo):
            raise TypeError(f"memo must be a PairMemo or None, got {type(memo).__name__}")
        client = cls.__new__(cls)
        client.config = config
        client._memo = memo
        client.client_id = read_int(state, "client-id")
        config.point(client.client_id)
        client._signing(signer, peers)
        client._survivors = read_ids(state, "survivors") if "survivors" in state else None
        check_instance(read_int(state, "instance"), config, "client state")
        client._stage = read_int(state, "stage")
        if client._stage >= len(cls._STEPS):
            raise ProtocolViolation(f"client state 'stage' must be < {len(cls._STEPS)}, got {client._stage}")
        client._enc_private = bytes(read_field(state, "enc-private", (bytes, bytearray)))
        client._mask_private = bytes(read_field(state, "mask-private", (bytes, bytearray)))
        client._seed = bytes(read_field(state, "self-mask-seed", (bytes, bytearray)))
        if len(client._seed) != SECRET_BYTES:
            raise ProtocolViolation(f"client state 'self-mask-seed' must be {SECRET_BYTES} bytes, got {len(client._seed)}")
        client._enc_public = crypto.public_from_private(client._enc_private)
        client._mask_public = crypto.public_from_private(client._mask_private)
        client._keys = dict(RosterMsg.from_dict({**state, "instance": config.instance}).keys)
        client._enc_keys = unpack_map(state, "enc-keys")
        client._share_ids = read_ids(state, "share-ids")
        raw = bytes(read_field(state, "shares", (bytes, bytearray)))
        if len(raw) != len(client._share_ids) * 2 * SHARE_BYTES:
            raise ProtocolViolation(f"client state 'shares' must be {len(client._share_ids) * 2 * SHARE_BYTES} bytes, "
                                f"got {len(raw)}")
        client._shares = np.frombuffer(raw, dtype=">u4").astype(np.int64).reshape(-1, 2 * SECRET_LIMBS)
        return client


# ----------------------------------------------------------------------------------------------
# server


class SecAggServer:
    """The server's side of an instance: receive_keys → receive_shares → receive_masked → receive_unmask.

    Attributes
    ----------
    present : dict[str, tuple[int, ...]]
        For each step reached, the sorted ids whose message was accepted.
    rejected : dict[int, str]
        Clients whose message carried a bad payload (wrong length, value outside the modulus,
        malformed keys or shares), with the reason; they count as dropped from that step on.

    Envelope violations — a message of another instance, a sender not expected at the step, two
    messages from one sender, a call out of order — raise :class:`ProtocolViolation` for the whole
    step. Fewer than ``threshold`` accepted messages at a step raise :class:`SecAggHalted`, and so
    does a client's secret that is left with fewer than ``share_threshold`` share holders (a
    sparse graph's neighbourhood ran short: the masks could not all be removed).

    Messages to clients are per client (:meth:`receive_keys` and :meth:`receive_masked` return
    ``{client id: message}``): a client of a sparse graph hears only about its neighbours. In the
    complete graph every client gets the same message object.

    A **signed** instance (``config.signed``, or any advertised keys signed by their node: the server
    follows its clients, :mod:`fedpriv.secagg.signing`) relays each client's key signature in the
    rosters, rejects unsigned keys, and runs the consistency check between upload and unmask:
    :meth:`receive_masked` then asks every uploader to sign the survivor set (``{client:
    ConsistencyRequest}``), :meth:`receive_consistency` collects the signatures (``U4``, halting below
    the threshold) and sends them with each unmask request to the signers.

    ``memo`` (in-process simulation only, :class:`~fedpriv.secagg.memo.PairMemo`): when the server
    rebuilds a dropped client's pairwise keys from its reconstructed (and checked) mask key, it
    takes the ones its simulated partners already agreed instead of redoing the X25519.
    """

    def __init__(self, config: ProtocolConfig, *, memo: PairMemo | None = None) -> None:
        if not isinstance(config, ProtocolConfig):
            raise TypeError(f"config must be a ProtocolConfig, got {type(config).__name__}")
        if memo is not None and not isinstance(memo, PairMemo):
            raise TypeError(f"memo must be a PairMemo or None, got {type(memo).__name__}")
        self.config = config
        self._memo = memo
        self.present: dict[str, tuple[int, ...]] = {}
        self.rejected: dict[int, str] = {}
        self.signed = config.signed
        self._steps = self._SIGNED_STEPS if self.signed else self._STEPS
        self._step = 0  # index into _steps of the next call; len(_steps) once finished or halted
        self._key_signatures: dict[int, bytes] = {}
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._rosters: dict[int, frozenset[int]] = {}  # who each client was told about (itself included)
        self._holders: dict[int, tuple[int, ...]] = {}  # who holds shares of each client's secrets
        self._commitments: dict[int, bytes] = {}
        self._masked_sum = np.zeros(config.dim, dtype=np.uint64)
        self._requests: dict[int, UnmaskRequest] = {}

    _STEPS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("advertise", "receive_keys"), ("share", "receive_shares"),
        ("upload", "receive_masked"), ("unmask", "receive_unmask"),
    )
    _SIGNED_STEPS: ClassVar[tuple[tuple[str, str], ...]] = (
        *_STEPS[:3], ("consistency", "receive_consistency"), _STEPS[3],
    )

    def _accept(self, call: str, msgs: Sequence[Any], kind: type[_M], expected: Sequence[int]) -> dict[int, _M]:
        """Envelope checks of one step's messages; returns them by sender."""
        if self._step >= len(self._steps) or self._steps[self._step][1] != call:
            nxt = self._steps[self._step][1] if self._step < len(self._steps) else "nothing (finished or halted)"
            raise ProtocolViolation(f"server: {call} is out of order or replayed; the next call must be {nxt}")
        allowed = set(expected)
        out: dict[int, _M] = {}
        for msg in msgs:
            if not isinstance(msg, kind):
                raise ProtocolViolation(f"{call} must be given {kind.__name__} messages, got {type(msg).__name__}")
            check_instance(msg.instance, self.config, f"{kind.__name__} from client {msg.sender}")
            if msg.sender not in allowed:
                raise ProtocolViolation(f"{kind.__name__} sender must be one of the {len(allowed)} clients expected "
                                    f"at step {self._steps[self._step][0]!r}, got client {msg.sender}")
            if msg.sender in out:
                raise ProtocolViolation(f"{kind.__name__}: two messages from client {msg.sender} in one step (replay?)")
            out[msg.sender] = msg
        return out

    def _reject(self, cid: int, reason: str) -> None:
        """Record a bad payload; the sender counts as dropped."""
        self.rejected[cid] = f"step {self._steps[self._step][0]!r}: {reason}"

    def _halt(self, present: int, detail: str = "") -> None:
        """Stop the instance at the current step (nothing is released)."""
        step = self._steps[self._step][0]
        self._step = len(self._steps)
        raise SecAggHalted(step, present, self.config.threshold, detail)

    def _close(self, ids: Iterable[int]) -> tuple[int, ...]:
        """Record who is present at the current step; halt below the threshold."""
        present = tuple(sorted(ids))
        self.present[self._steps[self._step][0]] = present
        if len(present) < self.config.threshold:
            self._halt(len(present))
        return present

    def _members(self, cid: int, present: Collection[int]) -> tuple[int, ...]:
        """``cid`` and its neighbours that are in ``present`` (sorted; ``present`` must contain ``cid``)."""
        if self.config.complete:
            return tuple(sorted(present))
        return tuple(sorted({cid, *(j for j in self.config.neighbours(cid) if j in present)}))

    def _check_holders(self, owners: Iterable[int], available: Collection[int],
                       uploaders: Collection[int] | None = None) -> None:
        """Halt unless each owner's secret still has ``share_threshold`` holders among ``available``.

        ``uploaders`` (once known) names which secret is needed: an uploader's self-mask seed, a
        dropped client's mask key.
        """
        t = self.config.share_threshold
        short = []
        for owner in owners:
            left = sum(1 for h in self._holders[owner] if h in available)
            if left < t:
                what = "secrets" if uploaders is None else "self-mask seed" if owner in uploaders else "mask key"
                short.append(f"client {owner}'s {what} ({left} left)")
        if short:
            self._halt(len(available), f"{len(short)} secret(s) have fewer share holders left than the Shamir "
                                       f"threshold t = {t}, so the masks cannot be removed: {', '.join(short[:8])}")

    def receive_keys(self, msgs: Sequence[KeysMsg]) -> dict[int, RosterMsg]:
        """Step 1: collect public keys; tell each client of ``U1`` the keys of its neighbours in ``U1``.

        A client with fewer than ``share_threshold − 1`` neighbours in ``U1`` cannot share its
        secrets: it gets no roster and counts as dropped at the next step.
        """
        cfg = self.config
        got = self._accept("receive_keys", msgs, KeysMsg, cfg.roster)
        if not self.signed and any(m.signature for m in got.values()):  # a client's node signs: follow it
            self.signed, self._steps = True, self._SIGNED_STEPS
        seen: set[bytes] = set()
        for cid in sorted(got):
            pair, signature = (got[cid].enc_public, got[cid].mask_public), got[cid].signature
            if any(not isinstance(k, bytes) or len(k) != crypto.KEY_BYTES for k in pair):
                self._reject(cid, f"public keys must be {crypto.KEY_BYTES} bytes each")
            elif pair[0] == pair[1] or seen & set(pair):
                self._reject(cid, "public keys must be distinct from each other and from other clients' keys")
            elif self.signed and not signature:
                self._reject(cid, "keys must be signed in a signed instance (its node has no signing key)")
            else:
                seen.update(pair)
                self._keys[cid] = pair
                if self.signed:
                    self._key_signatures[cid] = signature
        u1 = self._close(self._keys)
        self._step += 1
        if cfg.complete:
            shared = RosterMsg(cfg.instance, {c: self._keys[c] for c in u1}, self._signatures_of(u1))
            self._rosters = dict.fromkeys(u1, frozenset(u1))
            return dict.fromkeys(u1, shared)
        members = set(u1)
        out = {}
        for c in u1:
            ids = self._members(c, members)
            if len(ids) >= cfg.share_threshold:
                self._rosters[c] = frozenset(ids)
                out[c] = RosterMsg(cfg.instance, {j: self._keys[j] for j in ids}, self._signatures_of(ids))
        return out

    def _signatures_of(self, ids: Iterable[int]) -> dict[int, bytes]:
        """The key signatures of ``ids`` to relay (none in an unsigned instance)."""
        return {j: self._key_signatures[j] for j in ids} if self.signed else {}

    def receive_shares(self, msgs: Sequence[SharesMsg]) -> dict[int, InboxMsg]:
        """Step 2: collect encrypted share pairs; give each member of ``U2`` the ones addressed to it."""
        got = self._accept("receive_shares", msgs, SharesMsg, sorted(self._rosters))
        for cid in sorted(got):
            msg = got[cid]
            addressees = len(self._rosters[cid]) - 1
            if len(msg.ciphertexts) != addressees or cid in msg.ciphertexts \
                    or not self._rosters[cid].issuperset(msg.ciphertexts):
                self._reject(cid, f"ciphertexts must be addressed to exactly the other {addressees} members of its "
                                  f"roster")
            elif any(not isinstance(c, bytes) or len(c) != CIPHERTEXT_BYTES for c in msg.ciphertexts.values()):
                self._reject(cid, f"each ciphertext must be {CIPHERTEXT_BYTES} bytes")
            elif not isinstance(msg.commitment, bytes) or len(msg.commitment) != 32:
                self._reject(cid, "commitment must be a 32-byte SHA-256 digest")
            else:
                self._commitments[cid] = msg.commitment
        u2 = self._close(self._commitments)
        members = set(u2)
        self._holders = dict.fromkeys(u2, u2) if self.config.complete else {c: self._members(c, members) for c in u2}
        self._check_holders(u2, members)
        self._step += 1
        return {j: InboxMsg(self.config.instance, {i: got[i].ciphertexts[j] for i in self._holders[j] if i != j})
                for j in u2}

    def receive_masked(self, msgs: Sequence[MaskedMsg]) -> dict[int, Any]:
        """Step 3: validate and sum the masked uploads; ask each uploader for the shares it holds
        (``{client: UnmaskRequest}``), or in a signed instance to sign the survivor set (``{client:
        ConsistencyRequest}``)."""
        cfg = self.config
        u2 = self.present["share"]
        got = self._accept("receive_masked", msgs, MaskedMsg, u2)
        uploaders = []
        for cid in sorted(got):
            y = got[cid].masked
            if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or y.shape != (cfg.dim,):
                shape = getattr(y, "shape", None)
                self._reject(cid, f"masked input must be an integer array of shape ({cfg.dim},), got "
                                  f"shape {shape} dtype {getattr(y, 'dtype', type(y).__name__)}")
            elif y.size and (int(y.min()) < 0 or int(y.max()) >= cfg.codec.modulus):
                self._reject(cid, f"masked input values must lie in [0, 2^{cfg.codec.modulus_bits}), got "
                                  f"min {int(y.min())} max {int(y.max())}")
            else:
                self._masked_sum += y.astype(np.uint64)  # wraps mod 2^64; reduced mod M at the end
                uploaders.append(cid)
        u3 = self._close(uploaders)
        up = set(u3)
        self._check_holders(u2, up, up)  # only uploaders answer the unmask request
        self._step += 1
        if self.signed:
            return dict.fromkeys(u3, ConsistencyRequest(cfg.instance, u3))
        self._requests = self._unmask_requests(u2, u3, u3, {})
        return dict(self._requests)

    def _unmask_requests(self, u2: Sequence[int], u3: Sequence[int], askees: Sequence[int],
                         signatures: Mapping[int, bytes]) -> dict[int, UnmaskRequest]:
        """The unmask request of each of ``askees``: its share holders split into uploaders and dropped."""
        cfg, up = self.config, set(u3)
        if cfg.complete:
            shared = UnmaskRequest(cfg.instance, tuple(u3), tuple(c for c in u2 if c not in up), dict(signatures))
            return dict.fromkeys(askees, shared)
        return {j: UnmaskRequest(cfg.instance, tuple(h for h in self._holders[j] if h in up),
                                 tuple(h for h in self._holders[j] if h not in up), dict(signatures)) for j in askees}

    def receive_consistency(self, msgs: Sequence[ConsistencyMsg]) -> dict[int, UnmaskRequest]:
        """Signed instances, between upload and unmask: collect the uploaders' signatures of the survivor set (``U4``);
        ask each signer for the shares it holds, with every signature collected (the clients verify them)."""
        u2, u3 = self.present["share"], self.present["upload"]
        got = self._accept("receive_consistency", msgs, ConsistencyMsg, u3)
        signatures = {}
        for cid in sorted(got):
            signature = got[cid].signature
            if not isinstance(signature, bytes) or not signature:
                self._reject(cid, "the consistency reply must carry a signature")
            else:
                signatures[cid] = signature
        u4 = self._close(signatures)
        self._check_holders(u2, set(u4), set(u3))  # every needed secret still has t holders among the signers
        self._step += 1
        self._requests = self._unmask_requests(u2, u3, u4, signatures)
        return dict(self._requests)

    def receive_unmask(self, msgs: Sequence[UnmaskMsg]) -> np.ndarray:
        """Step 4: rebuild the self-mask seeds and the dropped clients' mask keys, unmask, decode the sum."""
        cfg = self.config
        u2, u3 = self.present.get("share", ()), self.present.get("upload", ())
        got = self._accept("receive_unmask", msgs, UnmaskMsg, sorted(self._requests))
        rows: dict[int, dict[int, np.ndarray]] = {}  # responder -> owner -> share of the secret needed
        for cid in sorted(got):
            msg, request = got[cid], self._requests[cid]
            if set(msg.self_shares) != set(request.uploaders) or set(msg.key_shares) != set(request.dropped):
                self._reject(cid, "unmask reply must hold a self-mask share for exactly the uploaders and a key "
                                  "share for exactly the dropped clients of its request")
                continue
            try:
                owners = [*request.uploaders, *request.dropped]
                blob = b"".join([*(msg.self_shares[u] for u in request.uploaders),
                                 *(msg.key_shares[d] for d in request.dropped)])
                rows[cid] = dict(zip(owners, shamir.shares_from_bytes(blob, count=len(owners), limbs=SECRET_LIMBS),
                                     strict=True))
            except (ValueError, TypeError) as exc:
                self._reject(cid, f"malformed share: {exc}")
        responders = self._close(rows)
        self._check_holders(u2, set(responders), set(u3))  # every needed secret has t answering holders
        self._step += 1
        secrets = self._reconstruct(u2, responders, rows)
        up = set(u3)
        seeds = [self._rebuilt(u, secrets[u], "self-mask seed") for u in u3]
        plus: list[bytes] = list(seeds)
        minus: list[bytes] = []
        for d in (c for c in u2 if c not in up):
            private = self._rebuilt(d, secrets[d], "mask private key")
            partners = [u for u in self._holders[d] if u in up]  # the uploaders that masked with d
            publics = [self._keys[u][1] for u in partners]
            infos = [crypto.pair_info(_MASK_PURPOSE, cfg.instance, u, d) for u in partners]
            # the rebuilt key of d (checked against its public key) agrees what each partner agreed with d
            pair_seeds = (crypto.agree_many(private, publics, infos=infos) if self._memo is None
                          else self._memo.agree(private, self._keys[d][1], publics, infos))
            for u, s in zip(partners, pair_seeds, strict=True):  # u added +PRG(s_ud) if u < d, −PRG if u > d (§6.6)
                (plus if u < d else minus).append(s)  # so the server adds back the opposite
        correction = crypto.prg_sum(plus, minus, cfg.dim, bits=cfg.codec.modulus_bits)
        total = (self._masked_sum - correction) & np.uint64(cfg.codec.modulus - 1)
        return cfg.codec.decode_sum(total, len(u3))

    def _reconstruct(self, owners: Sequence[int], responders: Sequence[int],
                     rows: Mapping[int, Mapping[int, np.ndarray]]) -> dict[int, np.ndarray]:
        """Each owner's secret limbs from the shares of its first ``share_threshold`` answering holders."""
        cfg, t = self.config, self.config.share_threshold
        if cfg.complete:  # one responder set for every owner: one set of Lagrange coefficients
            chosen = responders[:t]
            lam = shamir.lagrange_at_zero(cfg.points(chosen))
            shares = np.stack([np.stack([rows[r][o] for o in owners]) for r in chosen])  # (t, owners, limbs)
            return dict(zip(owners, shamir.combine(lam, shares), strict=True))
        answered = set(responders)
        chosen_rows = [[h for h in self._holders[o] if h in answered][:t] for o in owners]
        points = np.array([cfg.points(hs) for hs in chosen_rows], dtype=np.int64)  # (owners, t)
        shares = np.array([[rows[h][o] for h in hs] for o, hs in zip(owners, chosen_rows, strict=True)])
        return dict(zip(owners, shamir.combine_rows(shamir.lagrange_at_zero_rows(points), shares), strict=True))

    def _rebuilt(self, cid: int, limbs: np.ndarray, what: str) -> bytes:
        """A reconstructed secret after checking it against the commitment / advertised public key."""
        try:
            secret = shamir.limbs_to_secret(limbs)
        except ValueError:
            secret = b""
        ok = (_commit(secret) == self._commitments[cid] if what == "self-mask seed"
              else len(secret) == SECRET_BYTES and crypto.public_from_private(secret) == self._keys[cid][1])
        if not ok:
            raise ShareAuthenticationError(
                f"reconstructed {what} of client {cid} does not match its "
                f"{'commitment' if what == 'self-mask seed' else 'advertised public key'}: "
                f"a share used in the reconstruction is corrupted"
            )
        return secret

    @property
    def survivors(self) -> tuple[int, ...]:
        """Clients whose report is in the sum (the accepted uploaders)."""
        return self.present.get("upload", ())


# ----------------------------------------------------------------------------------------------
# in-process aggregator


class ProtocolAggregator(SecureAggregator):
    """``SA_ω`` by running the real protocol in-process: one :class:`SecAggClient` per client, one server.

    Parameters
    ----------
    omega : float
        Tolerated drop-out fraction; an instance halts below ``⌈(1−ω)n⌉`` present clients.
    codec : FixedPointCodec
        Encoding of the reports (its capacity must fit the roster size).
    seed : int
        Run seed of the keyed stochastic-rounding streams ``stream(seed, instance, c, "secagg-rounding")``
        and of the public randomness of a Harary graph (``stream(seed, instance, SERVER, "secagg-graph")``).
    graph : GraphPolicy (default: ``GraphPolicy()``, i.e. ``"auto"``)
        The masking graph of each instance (:mod:`fedpriv.secagg.graph`): complete below 100
        clients, SecAgg+'s random Harary graph from 100 on.

    The result equals :class:`~fedpriv.secagg.oracle.OracleAggregator`'s up to the quantization:
    per coordinate ``|protocol − oracle| < (#survivors)·codec.step``, and unbiased; with the same
    seed the complete and the Harary graph release bit-identical sums (the masks cancel exactly).
    The clients are simulated in ring order and share a :class:`~fedpriv.secagg.memo.PairMemo`,
    so each pair's key agreements and mask expansions run once for both ends.
    """

    name: ClassVar[str] = "protocol"

    def __init__(self, *, omega: float, codec: FixedPointCodec, seed: int, graph: GraphPolicy | None = None) -> None:
        super().__init__(omega=omega)
        if not isinstance(codec, FixedPointCodec):
            raise TypeError(f"codec must be a FixedPointCodec, got {type(codec).__name__}")
        if graph is not None and not isinstance(graph, GraphPolicy):
            raise TypeError(f"graph must be a GraphPolicy or None, got {type(graph).__name__}")
        self.codec = codec
        self.seed = check_int(seed, "seed", minimum=0)
        self.graph = GraphPolicy() if graph is None else graph

    def __repr__(self) -> str:
        return f"ProtocolAggregator(omega={self.omega}, codec={self.codec!r}, seed={self.seed}, graph={self.graph!r})"

    def guarantee(self, num_clients: int) -> SecAggGuarantee:
        """What an instance over ``num_clients`` guarantees (graph, ``k``, ``t``, threat model, σ, η)."""
        return self.graph.guarantee(num_clients, self.omega)

    def aggregate(
        self, reports: np.ndarray, client_ids: Any, *, dropout: DropoutModel, instance: int
    ) -> AggregationResult:
        """Run one instance; clients absent at a step (``dropout.presence``) send nothing from then on."""
        start = time.perf_counter()
        x, ids = check_reports(reports, client_ids)
        instance = check_int(instance, "instance", minimum=0)
        rows = {int(c): x[k] for k, c in enumerate(ids)}
        graph, guarantee = self.graph.resolve(ids.size, self.omega, seed=self.seed)
        config = ProtocolConfig(instance=instance, roster=tuple(sorted(rows)), threshold=guarantee.survivor_threshold,
                                dim=x.shape[1], codec=self.codec, graph=graph)
        online = {step: set(ids[mask].tolist()) for step, mask in dropout.presence(ids, instance).items()}
        order = config.ring_order()  # neighbours are simulated close together (PairMemo's pending sums)
        memo = PairMemo(config.dim, self.codec.word_dtype)
        server = SecAggServer(config, memo=memo)
        traffic = _Traffic(config.roster)
        seconds: dict[str, float] = {}
        total = None
        halted_at, halt_reason = None, ""
        try:
            tic = time.perf_counter()
            clients = {c: SecAggClient(c, config, memo=memo) for c in order if c in online["advertise"]}
            rosters = server.receive_keys(traffic.up([cl.advertise() for cl in clients.values()]))
            seconds["advertise"] = time.perf_counter() - tic
            tic = time.perf_counter()
            traffic.down(rosters)
            shares = [clients[c].share_keys(rosters[c]) for c in order if c in rosters and c in online["share"]]
            inboxes = server.receive_shares(traffic.up(shares))
            del shares
            seconds["share"] = time.perf_counter() - tic
            tic = time.perf_counter()
            traffic.down(inboxes)
            memo.expect_uploaders([c for c in inboxes if c in online["upload"]])
            masked = [clients[c].masked_input(rows[c], inboxes[c], rounding_stream(self.seed, instance, c))
                      for c in order if c in inboxes and c in online["upload"]]
            del inboxes
            requests = server.receive_masked(traffic.up(masked))
            del masked
            seconds["upload"] = time.perf_counter() - tic
            tic = time.perf_counter()
            traffic.down(requests)
            replies = [clients[c].unmask(requests[c]) for c in order if c in requests and c in online["unmask"]]
            total = server.receive_unmask(traffic.up(replies))
            seconds["unmask"] = time.perf_counter() - tic
        except SecAggHalted as halt:
            halted_at, halt_reason = halt.stage, halt.detail
        present = {step: np.asarray(members, dtype=np.int64) for step, members in server.present.items()}
        survivors = present["upload"] if halted_at in (None, "unmask") else np.empty(0, dtype=np.int64)
        metrics = {
            "seconds": time.perf_counter() - start,
            **{f"seconds-{step}": s for step, s in seconds.items()},
            "quantization-step": self.codec.step,
            **traffic.metrics(),
            "graph-degree": float(guarantee.degree),
            "share-threshold": float(guarantee.share_threshold),
            "memo-agreements-reused": float(memo.hits["agree"]),
            "memo-masks-reused": float(memo.hits["masks"]),
        }
        return AggregationResult(total, survivors, present, config.threshold, halted_at=halted_at,
                                 rejected=dict(server.rejected), metrics=metrics, halt_reason=halt_reason)


class _Traffic:
    """Payload bytes each simulated client sent and received (a message object shared by many is sized once)."""

    def __init__(self, roster: Sequence[int]) -> None:
        self._up = dict.fromkeys(roster, 0)
        self._down = dict.fromkeys(roster, 0)
        self._sizes: dict[int, int] = {}

    def up(self, msgs: list[Any]) -> list[Any]:
        """Count a step's client messages; return them."""
        for m in msgs:
            self._up[m.sender] += message_bytes(m)
        return msgs

    def down(self, msgs: Mapping[int, Any]) -> None:
        """Count the server's per-client messages."""
        for c, m in msgs.items():
            size = self._sizes.get(id(m))
            if size is None:
                size = self._sizes[id(m)] = message_bytes(m)
            self._down[c] += size

    def metrics(self) -> dict[str, float]:
        """Mean bytes up/down per client that sent anything, and the most any client sent."""
        talkers = [c for c, b in self._up.items() if b]
        return {"bytes-up-per-client": float(np.mean([self._up[c] for c in talkers])) if talkers else 0.0,
                "bytes-up-max": float(max(self._up.values())),
                "bytes-down-per-client": float(np.mean([self._down[c] for c in talkers])) if talkers else 0.0}
