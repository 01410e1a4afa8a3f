"""The vertical k-means ClientApp: one data party ℓ of Algorithm 2 (vertical_kmeans.md §3.2, §10, §18).

The Flower twin of the party side of :func:`fedpriv.clustering.vertical.run_vertical_kmeans`: every
answer comes from the same fedpriv functions with the same keyed streams
(:func:`~fedpriv.clustering.vertical.party_count`, :func:`~fedpriv.clustering.vertical.party_encode`,
:func:`~fedpriv.clustering.vertical.party_rng`), so a Flower run releases what the in-process run
releases. One ``@app.query`` handler routes on ``op`` in the message's ConfigRecord ``"config"``:

``"client-id"`` (or no ``op``: :func:`strategies.secure_sum_app.query_client_ids`' question)
    → MetricRecord ``"metrics"`` ``{"client-id": ℓ}`` with ℓ = ``node_config["partition-id"]``.
``"count"`` with ``eps0`` (§18 round 0)
    → MetricRecord ``"metrics"`` ``{"n-hat": n + Lap(1/ε_0)}`` (ε_0 = 0: the exact public n, for the
    methods without an n̂ query, :func:`~fedpriv.clustering.methods.count_epsilon`).
``"encode"`` with ``kprime``, ``n-hat`` and the budget the server assumes (§18 round 1)
    → ArrayRecord ``"party-message"`` (:meth:`~fedpriv.clustering.vertical.PartyMessage.to_arrays`)
    and ConfigRecord ``"party"`` ``{party, m_l, k_l}``.

Guarantees (what a curious server cannot make a party do):

* **The budget is the party's own.** A party recomputes ε_0, ε_1, ε_2, δ_2 from *its* configuration
  (:func:`~fedpriv.clustering.methods.budget_for`) and refuses a message whose ``eps0``, method,
  budget or sketch parameters differ; the noise is always drawn with its own values. The default
  δ = 1/n̂ (§14) uses the server's n̂, so a party also refuses an n̂ that lies implausibly far
  below its own n (more than ``N_HAT_TAIL/ε_0``: probability ``e^{-40}/2`` for an honest server)
  or, for the exact-count methods, differs from n; the counting party also checks it is its answer.
* **Each op is answered at most once per run** (§18): a repeated ``count`` or ``encode`` would need
  more budget, and gets an error reply. The answered ops are kept in the node's ``context.state``.
* **The hash key stays on the node** (§5.5 R3, §19 item 12). It is given to the factory only
  (client-side provisioning): a :class:`~fedpriv.sketch.hashing.HashKey`, or the path of a
  client-side key file holding the secret bytes (what a Ray actor or a SuperNode reads, since a
  ``HashKey`` refuses to be pickled). It is never read from the run config or a message, and a
  reply holds only the :class:`~fedpriv.clustering.vertical.PartyMessage` arrays and three integers.

Refusals and malformed requests are answered with an ``Error`` reply
(``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``) naming the app, what it expected, what arrived and the fix.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

from clients.app_utils import Refusal, partition_id, refusal_reply, state_record
from clients.contract import CLIENT_ID, CONFIG, METRICS
from fedpriv._validation import check_int
from fedpriv.clustering.vertical import (
    SKETCH_METHODS,
    VerticalKMeansConfig,
    budget_for,
    count_epsilon,
    party_count,
    party_encode,
    party_rng,
)
from fedpriv.data.vertical import VerticalData
from fedpriv.sketch.hashing import HashKey

__all__ = [
    "ANSWERED",
    "BUDGET_FIELDS",
    "EPS0",
    "KPRIME",
    "N_HAT",
    "N_HAT_TAIL",
    "OP",
    "OPS",
    "PARTY_INFO",
    "PARTY_MESSAGE",
    "encode_request",
    "load_key",
    "make_vertical_kmeans_client_app",
]

# ConfigRecord CONFIG keys of a request
OP = "op"
EPS0 = "eps0"
KPRIME = "kprime"
N_HAT = "n-hat"  # also the MetricRecord key of the count reply
#: Ops a party answers (``"client-id"`` also when the request has no ``op``).
OPS: tuple[str, ...] = ("client-id", "count", "encode")
#: Request fields of ``encode`` that a party checks against its own configuration.
BUDGET_FIELDS: tuple[str, ...] = ("method", "eps1", "eps2", "delta2", "M", "gamma", "dplsf-preset", "hash-backend")
# reply records of encode
PARTY_MESSAGE = "party-message"
PARTY_INFO = "party"
#: context.state ConfigRecord: op -> True once answered (and "count-answer" -> the n̂ this node released).
ANSWERED = "vertical-kmeans-answered"
_COUNT_ANSWER = "count-answer"
#: An n̂ below n − N_HAT_TAIL/ε_0 is refused: an honest server's n̂ is that low with probability e^{-40}/2.
N_HAT_TAIL = 40.0
_APP = "vertical k-means ClientApp"


def load_key(path: str | os.PathLike[str]) -> HashKey:
    """The parties' shared hash key from a client-side key file (its raw bytes, 16 to 64 of them)."""
    return HashKey(Path(path).read_bytes())


def encode_request(cfg: VerticalKMeansConfig, kprime: int, n_hat: float, parties: int) -> dict[str, Any]:
    """The ``encode`` request's ConfigRecord content as the server sends it (§18 round 1)."""
    budget = budget_for(cfg, n_hat, parties)
    return {OP: "encode", KPRIME: int(kprime), N_HAT: float(n_hat), "method": cfg.method, "eps1": budget.eps1,
            "eps2": budget.eps2, "delta2": budget.delta2, "M": cfg.M, "gamma": cfg.gamma,
            "dplsf-preset": cfg.dplsf_preset, "hash-backend": cfg.hash_backend}


def _once(context: Context, op: str) -> None:
    """Refuse ``op`` if this node already answered it in this run (§18)."""
    if op in state_record(context, ANSWERED):
        raise Refusal(f"expected each op at most once per run, got a second {op!r}: a repeated answer would need "
                       "more privacy budget (spec §18); start a new run for a new answer")


def _same(expected: Any, got: Any) -> bool:
    """Equal values; floats equal to 1e-12 relative (the server computes them with the same formula)."""
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return math.isclose(expected, float(got), rel_tol=1e-12, abs_tol=0.0)
    return type(expected) is type(got) and expected == got


def _number(cfg: ConfigRecord, name: str) -> float:
    value = cfg.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Refusal(f"expected a finite number {name!r} in the request's ConfigRecord {CONFIG!r}, got {value!r}")
    return float(value)


def make_vertical_kmeans_client_app(data: VerticalData, cfg: VerticalKMeansConfig, *, seed: int,
                                    key: HashKey | str | os.PathLike[str]) -> ClientApp:
    """A ClientApp answering the client-id, count and encode ops of party ``node_config["partition-id"]``.

    Parameters
    ----------
    data : VerticalData
        The parties' column blocks; a node uses only its own block ``data.blocks[ℓ]`` and ``data.ids``.
    cfg : VerticalKMeansConfig
        The party's configuration: its budget and sketch parameters come from here, never from a message.
    seed : int
        Run seed of the party's keyed streams (``party_rng(seed, ℓ, purpose)``).
    key : HashKey or path
        The parties' shared secret hash key, or a client-side file holding its bytes (read on the node).
    """
    if not isinstance(data, VerticalData):
        raise TypeError(f"data must be a VerticalData, got {type(data).__name__}")
    if not isinstance(cfg, VerticalKMeansConfig):
        raise TypeError(f"cfg must be a VerticalKMeansConfig, got {type(cfg).__name__}")
    if cfg.traits.local == "central":
        raise ValueError(f"cfg.method must be a vertical method (parties hold column blocks), got the central "
                         f"baseline {cfg.method!r}")
    seed = check_int(seed, "seed", minimum=0)
    if not isinstance(key, (HashKey, str, os.PathLike)):
        raise TypeError(f"key must be a HashKey or the path of a key file, got {type(key).__name__}")
    parties = data.parties
    own_eps0 = count_epsilon(cfg)
    app = ClientApp()

    def count(context: Context, party: int, request: ConfigRecord) -> RecordDict:
        """Round 0 (§3.2 3a): n̂ = n + Lap(1/ε_0) with the party's own ε_0."""
        _once(context, "count")
        eps0 = _number(request, EPS0)
        if not _same(own_eps0, eps0):
            raise Refusal(f"expected eps0 = {own_eps0!r} (this party's own (1 - b)*epsilon for method "
                           f"{cfg.method!r}), got {eps0!r}; give the server the parties' configuration")
        n_hat = party_count(data.blocks[party], own_eps0, party_rng(seed, party, "count"))
        answered = state_record(context, ANSWERED)
        answered["count"], answered[_COUNT_ANSWER] = True, n_hat
        return RecordDict({METRICS: MetricRecord({N_HAT: n_hat})})

    def check_n_hat(context: Context, n_hat: float) -> None:
        """Refuse an n̂ that would weaken δ = 1/n̂ or that is not what this party released."""
        n = data.n
        answered = state_record(context, ANSWERED)
        if _COUNT_ANSWER in answered and answered[_COUNT_ANSWER] != n_hat:
            raise Refusal(f"expected n-hat = {answered[_COUNT_ANSWER]!r} (this party's count answer), got {n_hat!r}")
        if own_eps0 == 0 and n_hat != n:
            raise Refusal(f"expected n-hat = {n} (the exact public n of method {cfg.method!r}), got {n_hat!r}")
        if own_eps0 > 0 and n_hat < n - N_HAT_TAIL / own_eps0:
            raise Refusal(f"expected an n-hat of n + Lap(1/eps0), got {n_hat!r}, more than {N_HAT_TAIL:g}/eps0 "
                           "below this party's n: it would weaken delta = 1/n-hat")

    def encode(context: Context, party: int, request: ConfigRecord) -> RecordDict:
        """Round 1 (§3.2 steps 1–2): LocCluster and MemEnc with the party's own budget and the server's k'."""
        _once(context, "encode")
        kprime = request.get(KPRIME)
        if isinstance(kprime, bool) or not isinstance(kprime, int) or kprime < 1:
            raise Refusal(f"expected an int {KPRIME!r} >= 1 in the encode request, got {kprime!r}")
        n_hat = _number(request, N_HAT)
        check_n_hat(context, n_hat)
        try:
            own = encode_request(cfg, kprime, n_hat, parties)
        except ValueError as exc:  # e.g. an n̂ <= 1 with the default δ = 1/n̂
            raise Refusal(f"expected an n-hat this party can derive its budget from, got {n_hat!r}: {exc}") from None
        for name in BUDGET_FIELDS:
            if not _same(own[name], request.get(name)):
                raise Refusal(f"expected {name} = {own[name]!r} (this party's own configuration), got "
                               f"{request.get(name)!r}; the party never takes its budget or sketch parameters "
                               "from a message")
        budget = budget_for(cfg, n_hat, parties)
        party_key = None
        if cfg.method in SKETCH_METHODS:
            party_key = key if isinstance(key, HashKey) else load_key(key)
        block = data.blocks[party]
        message = party_encode(block, data.ids, party, cfg, kprime, budget, party_key, seed=seed)
        state_record(context, ANSWERED)["encode"] = True
        arrays = ArrayRecord({name: Array(np.ascontiguousarray(a)) for name, a in message.to_arrays().items()})
        info = ConfigRecord({"party": party, "m_l": int(block.shape[1]), "k_l": message.k})
        return RecordDict({PARTY_MESSAGE: arrays, PARTY_INFO: info})

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """Answer one op of this party (module docstring), or an Error reply saying why not."""
        try:
            party = partition_id(context, parties, "one party per node",
                                 template="partition-id must be a party index in [0, {limit}), got {got!r}")
            request = msg.content.config_records.get(CONFIG, ConfigRecord())
            op = request.get(OP, "client-id")
            if op == "client-id":
                content = RecordDict({METRICS: MetricRecord({CLIENT_ID: party})})
            elif op == "count":
                content = count(context, party, request)
            elif op == "encode":
                content = encode(context, party, request)
            else:
                raise Refusal(f"expected op in {OPS!r}, got {op!r}")
        except Refusal as exc:
            return refusal_reply(msg, context, _APP, "party", exc)
        return Message(content, reply_to=msg)

    return app
