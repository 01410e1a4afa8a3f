"""The server's side of a secure-aggregation instance (Bonawitz et al. 2017; steps in :mod:`fedpriv.secagg.protocol`).

:class:`SecAggServer` is a state machine receive_keys → receive_shares → receive_masked →
(receive_consistency) → receive_unmask over the frozen messages of :mod:`fedpriv.secagg.messages`,
docs/federated_mf.md §6.6.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from fedpriv.secagg import crypto, shamir
from fedpriv.secagg.base import SecAggHalted
from fedpriv.secagg.crypto import ProtocolViolation, ShareAuthenticationError
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
    check_instance,
)
from fedpriv.secagg.share_layout import _MASK_PURPOSE, CIPHERTEXT_BYTES, SECRET_BYTES, SECRET_LIMBS, _commit


class _Sent(Protocol):
    """A client → server message: it names its instance and its sender."""

    @property
    def instance(self) -> int: ...

    @property
    def sender(self) -> int: ...


_M = TypeVar("_M", bound=_Sent)


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

