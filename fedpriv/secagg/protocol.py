"""Secure aggregation of Bonawitz et al. 2017 over a complete or SecAgg+ sparse graph (honest-but-curious), docs/federated_mf.md §6.6.

The protocol is written as two pure state machines that exchange frozen message dataclasses, so the
same code runs in-process (:class:`ProtocolAggregator`) and behind Flower messages (each message's
``to_dict``/``from_dict`` is ConfigRecord/ArrayRecord-compatible). The masking graph
(:mod:`fedpriv.secagg.graph`, in :class:`ProtocolConfig`) says who a client works with: everyone
(complete graph) or its ``k`` neighbours in a random Harary graph (SecAgg+, Bell et al. 2020).
``N(i)`` below is client ``i``'s neighbours and ``t`` the Shamir threshold of the graph. The client's
machine is :mod:`fedpriv.secagg.protocol_client`, the server's :mod:`fedpriv.secagg.protocol_server` and
the shared secrets' layout :mod:`fedpriv.secagg.share_layout`; this module runs them in-process and is
the import path for all of them.

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

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from fedpriv._validation import check_int
from fedpriv.rng import stream
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
    message_bytes,
)
from fedpriv.secagg.protocol_client import SecAggClient
from fedpriv.secagg.protocol_server import SecAggServer
from fedpriv.secagg.signing import SignatureError

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


def stages(signed: bool) -> tuple[str, ...]:
    """The steps of an instance in order: :data:`~fedpriv.secagg.base.STAGES`, with ``"consistency"`` before
    ``"unmask"`` in a signed one."""
    return ("advertise", "share", "upload", "consistency", "unmask") if signed else STAGES


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
