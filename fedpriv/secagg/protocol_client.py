"""The client's side of a secure-aggregation instance (Bonawitz et al. 2017; steps in :mod:`fedpriv.secagg.protocol`).

:class:`SecAggClient` is a state machine advertise → share_keys → masked_input → (consistency) →
unmask over the frozen messages of :mod:`fedpriv.secagg.messages`, docs/federated_mf.md §6.6.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from fedpriv._validation import as_real_array, check_int
from fedpriv.secagg import crypto, shamir
from fedpriv.secagg.crypto import ProtocolViolation
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
    pack_map,
    read_field,
    read_ids,
    read_int,
    unpack_map,
)
from fedpriv.secagg.share_layout import (
    _ENC_PURPOSE,
    _MASK_PURPOSE,
    SECRET_BYTES,
    SECRET_LIMBS,
    SHARE_BYTES,
    _ad,
    _commit,
)
from fedpriv.secagg.signing import PeerKeys, SignatureError, Signer, keys_payload, survivors_payload


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

