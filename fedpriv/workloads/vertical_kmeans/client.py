"""A data party's side of vertical k-means: the count and encode ops of Algorithm 2 (docs/vertical_kmeans.md §3.2, §10, §18).

Party ℓ (client id ℓ) holds its column block ``X^(ℓ)`` and the user ids, the parties' key
(:class:`~fedpriv.workloads.vertical_kmeans.party_key.PartyKey`) and nothing else. It answers
repetition r of a run with the party-side functions of :mod:`fedpriv.clustering.vertical`
(:func:`~fedpriv.clustering.vertical.party_count`, :func:`~fedpriv.clustering.vertical.party_encode`),
with the hash key K_r derived from its key file and, in a simulation, the keyed streams
``party_rng(seed + r − 1, ℓ, purpose)`` — so every runtime releases the same bits for K_r.

Guarantees (what a curious server cannot make a party do):

* **The budget is the party's own.** A party recomputes ε_0, ε_1, ε_2, δ_2 from *its* configuration
  (:func:`~fedpriv.clustering.methods.budget_for`) and refuses a request whose ``eps0``, method,
  budget or sketch parameters differ; the noise is always drawn with its own values. The default
  δ = 1/n̂ (§14) uses the server's n̂, so a party also refuses an n̂ that lies implausibly far below
  its own n (more than :data:`N_HAT_TAIL`/ε_0: probability e^{-40}/2 for an honest server) or, for
  the exact-count methods, differs from n; the counting party also checks it is its own answer.
* **Each op is answered at most once per repetition**, for repetitions 1..``repetitions`` only
  (§18: a repeated answer would need more budget). The answered repetitions are kept in the node's
  state (Flower: ``context.state``).
* **The hash key stays on the node** (§5.5 R3, §19 item 12). It comes from the node's key file
  (node config :data:`~fedpriv.workloads.vertical_kmeans.party_key.HASH_KEY_FILE`), never from the
  run config or a message, and a reply holds only the
  :class:`~fedpriv.clustering.party_message.PartyMessage` arrays and four integers.

Randomness: every draw of a party (its count's Laplace noise, DPLSF, the phantoms, the IND-LAP or
LDP-AGG noise) comes from the node's :class:`~fedpriv.node.randomness.Randomness`
(:func:`repetition_randomness`). Keyed (a simulation): the streams of the run seed of repetition r,
``seed + r − 1`` (``party_rng(seed + r − 1, ℓ, purpose)``), so every runtime draws the same
noise (whoever knows the run seed could recompute it: the simulation setting of the source's
experiments). Secret (a deployed node, whatever the run config says): ChaCha20 streams keyed by a
node secret from the OS CSPRNG and (r, ℓ, purpose), which never leave the node.

What each request releases, and what a deployed node's ledger is charged:
:func:`fedpriv.workloads.vertical_kmeans.node.repetition_release`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.clustering.methods import SKETCH_METHODS, budget_for, count_epsilon
from fedpriv.clustering.vertical import party_count, party_encode, party_stream
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.workloads.base import Node
from fedpriv.workloads.messages import Arrays, Config, Message, Metrics, Refusal, Request
from fedpriv.workloads.vertical_kmeans.contract import (
    BUDGET_FIELDS,
    COUNT,
    ENCODE,
    EPS0,
    KPRIME,
    N_HAT,
    OP,
    OPS,
    PARTY_INFO,
    PARTY_MESSAGE,
    REPETITION,
    encode_fields,
)
from fedpriv.workloads.vertical_kmeans.party_key import PartyKey

__all__ = ["COUNTED", "ENCODED", "N_HAT_TAIL", "Party", "handle_party", "repetition_randomness"]

#: An n̂ below n − N_HAT_TAIL/ε_0 is refused: an honest server's n̂ is that low with probability e^{-40}/2.
N_HAT_TAIL = 40.0
#: Node state: the repetitions whose count this party answered, and its answers (same order).
COUNTED, COUNT_ANSWERS = "counted", "count-answers"
#: Node state: the repetitions this party encoded.
ENCODED = "encoded"


@dataclass(frozen=True)
class Party:
    """What party ℓ's node holds: its column block, the user ids and the parties' key (None: no sketch method)."""

    block: np.ndarray
    ids: np.ndarray
    key: PartyKey | None


def _same(expected: Any, got: Any) -> bool:
    """Equal values; floats equal to 1e-12 relative (the server computes them with the same formula)."""
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return math.isclose(expected, float(got), rel_tol=1e-12, abs_tol=0.0)
    return type(expected) is type(got) and expected == got


def _number(fields: Any, name: str) -> float:
    value = fields.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Refusal(f"expected a finite number {name!r} in the request's config, got {value!r}")
    return float(value)


def _repetition(fields: Any, repetitions: int) -> int:
    r = fields.get(REPETITION)
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 1 <= r <= repetitions:
        raise Refusal(f"expected an int {REPETITION!r} in 1..{repetitions} (this party's repetitions), got {r!r}")
    return int(r)


def repetition_randomness(randomness: Randomness, repetition: int) -> tuple[Randomness, int]:
    """Where a party's draws of repetition r come from: (randomness, step) for :func:`party_stream`.

    Keyed by the run seed s: ``KeyedRandomness(s + r − 1)`` at step 0, the streams
    ``party_rng(s + r − 1, ℓ, purpose)``; a node's secret randomness: itself, at step r.
    """
    if isinstance(randomness, KeyedRandomness):
        return KeyedRandomness(randomness.run_seed + repetition - 1), 0
    if randomness.keyed:
        raise TypeError(f"a keyed randomness must be a KeyedRandomness (its run seed keys the repetitions), got "
                        f"{type(randomness).__name__}")
    return randomness, repetition


def handle_party(setup: Any) -> Any:
    """The handler of party ``node.client``: the count and encode ops of each repetition, once each (module docstring)."""
    cfg, parties, n = setup.kmeans, setup.data.parties, setup.data.n
    own_eps0 = count_epsilon(cfg)

    def rng(node: Node, repetition: int, purpose: str) -> np.random.Generator:
        randomness, step = repetition_randomness(node.randomness, repetition)
        return party_stream(randomness, node.client, purpose, step=step)

    def count(node: Node, fields: Any, r: int) -> Message:
        """Round 0 (§3.2 3a): n̂ = n + Lap(1/ε_0) with the party's own ε_0."""
        counted = [int(v) for v in node.state.get(COUNTED, [])]
        if r in counted:
            raise Refusal(f"expected each op at most once per repetition, got a second {COUNT!r} of repetition {r}: "
                          "a repeated answer would need more privacy budget (docs/vertical_kmeans.md §18)")
        eps0 = _number(fields, EPS0)
        if not _same(own_eps0, eps0):
            raise Refusal(f"expected eps0 = {own_eps0!r} (this party's own (1 - b)*epsilon for method "
                          f"{cfg.method!r}), got {eps0!r}; give the server the parties' configuration")
        n_hat = party_count(node.data.block, own_eps0, rng(node, r, "count"))
        node.state[COUNTED] = [*counted, r]
        node.state[COUNT_ANSWERS] = [*(float(v) for v in node.state.get(COUNT_ANSWERS, [])), n_hat]
        return Message({"metrics": Metrics({N_HAT: n_hat, REPETITION: r})})

    def check_n_hat(node: Node, r: int, n_hat: float) -> None:
        """Refuse an n̂ that would weaken δ = 1/n̂ or that is not what this party released."""
        counted = [int(v) for v in node.state.get(COUNTED, [])]
        if r in counted:
            answer = float(node.state[COUNT_ANSWERS][counted.index(r)])
            if answer != n_hat:
                raise Refusal(f"expected n-hat = {answer!r} (this party's count answer of repetition {r}), got "
                              f"{n_hat!r}")
        if own_eps0 == 0 and n_hat != n:
            raise Refusal(f"expected n-hat = {n} (the exact public n of method {cfg.method!r}), got {n_hat!r}")
        if own_eps0 > 0 and n_hat < n - N_HAT_TAIL / own_eps0:
            raise Refusal(f"expected an n-hat of n + Lap(1/eps0), got {n_hat!r}, more than {N_HAT_TAIL:g}/eps0 "
                          "below this party's n: it would weaken delta = 1/n-hat")

    def encode(node: Node, fields: Any, r: int) -> Message:
        """Round 1 (§3.2 steps 1–2): LocCluster and MemEnc with the party's own budget, the server's k' and K_r."""
        encoded = [int(v) for v in node.state.get(ENCODED, [])]
        if r in encoded:
            raise Refusal(f"expected each op at most once per repetition, got a second {ENCODE!r} of repetition {r}: "
                          "a repeated answer would need more privacy budget (docs/vertical_kmeans.md §18)")
        kprime = fields.get(KPRIME)
        if isinstance(kprime, bool) or not isinstance(kprime, int) or kprime < 1:
            raise Refusal(f"expected an int {KPRIME!r} >= 1 in the encode request, got {kprime!r}")
        n_hat = _number(fields, N_HAT)
        check_n_hat(node, r, n_hat)
        try:
            own = encode_fields(cfg, r, kprime, n_hat, parties)
        except ValueError as exc:  # e.g. an n̂ <= 1 with the default δ = 1/n̂
            raise Refusal(f"expected an n-hat this party can derive its budget from, got {n_hat!r}: {exc}") from None
        for name in BUDGET_FIELDS:
            if not _same(own[name], fields.get(name)):
                raise Refusal(f"expected {name} = {own[name]!r} (this party's own configuration), got "
                              f"{fields.get(name)!r}; the party never takes its budget or sketch parameters "
                              "from a message")
        key = None
        if cfg.method in SKETCH_METHODS:
            if node.data.key is None:
                raise Refusal(f"method {cfg.method!r} needs the parties' key, and this node has none")
            key = node.data.key.repetition_key(setup.digest, r)
        block = node.data.block
        randomness, step = repetition_randomness(node.randomness, r)
        message = party_encode(block, node.data.ids, node.client, cfg, kprime, budget_for(cfg, n_hat, parties), key,
                               randomness=randomness, step=step)
        node.state[ENCODED] = [*encoded, r]
        return Message({PARTY_MESSAGE: Arrays(message.to_arrays()),
                        PARTY_INFO: Config({"party": int(node.client), "m_l": int(block.shape[1]), "k_l": message.k,
                                            REPETITION: r})})

    def handle(request: Request, node: Node) -> Message:
        fields = request.message.get("config", {})
        op = fields.get(OP)
        if op not in OPS:
            raise Refusal(f"expected op in {OPS!r}, got {op!r}")
        r = _repetition(fields, setup.repetitions)
        return count(node, fields, r) if op == COUNT else encode(node, fields, r)

    return handle
