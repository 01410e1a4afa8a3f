"""Shared setup of the vertical k-means workload tests: the run, its setup, a party's node and requests, the run in
process with the parties holding a fixed key, and a repetition by direct calls of the core's functions."""

from __future__ import annotations

from typing import Any

from fedpriv.clustering.kmeans import assign
from fedpriv.clustering.methods import CENTRAL_METHODS, SKETCH_METHODS, budget_for, count_epsilon, server_kprime
from fedpriv.clustering.party_message import PartyMessage
from fedpriv.clustering.vertical import (
    central_run,
    count_party,
    evaluate,
    exact_weights,
    party_count,
    party_encode,
    party_rng,
    privacy_record,
    server_centers,
    server_weights,
)
from fedpriv.config import RunConfig
from fedpriv.node.policy import NodePolicy
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.rundir import Committed
from fedpriv.workloads import Config, Node, Request, get_workload
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.protocol import Commit, Outcome, drive
from fedpriv.workloads.vertical_kmeans.client import Party
from fedpriv.workloads.vertical_kmeans.contract import N_HAT, encode_fields
from fedpriv.workloads.vertical_kmeans.party_key import PartyKey

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()
SECRET = bytes(range(7, 39))
KEY = PartyKey(SECRET)
BASE = {"task": "vertical-kmeans", "kmeans-samples": 600, "sketch-repetitions": 64, "epsilon": 2.0, "seed": 4,
        "repetitions": 3}
CFG = RunConfig.from_mapping(BASE)
WORKLOAD = get_workload("vertical-kmeans")
SETUP = WORKLOAD.setup(CFG)
DATA = SETUP.data


def _setup(**changes):
    return WORKLOAD.setup(RunConfig.from_mapping({**BASE, **changes}))


def _node(party: int, setup=SETUP, key=KEY, randomness: Randomness | None = None) -> Node:
    """Party ``party``'s node: keyed by the run seed (a simulation) unless ``randomness`` is given."""
    return Node(client=party, data=Party(block=setup.data.blocks[party], ids=setup.data.ids, key=key),
                randomness=randomness or KeyedRandomness(setup.seed))


def _ask(node: Node, setup=SETUP, **fields) -> Message_:
    return WORKLOAD.handler(setup)(Request(client=node.client, kind="query", message=Message_({"config": Config(fields)})),
                                   node)


def _encode(node: Node, setup=SETUP, repetition=1, kprime=3, n_hat=600.0, changes=None) -> Message_:
    """The server's encode request of ``repetition`` for (k', n̂), with ``changes`` applied."""
    fields = encode_fields(setup.kmeans, repetition, kprime, n_hat, setup.data.parties)
    return _ask(node, setup, **{**fields, **(changes or {})})


def _count(node: Node, setup=SETUP, repetition=1) -> float:
    return _ask(node, setup, op="count", repetition=repetition, eps0=count_epsilon(setup.kmeans))["metrics"][N_HAT]


def _honest(setup=SETUP, key=KEY) -> InProcess:
    """The in-process transport with every party's node holding ``key`` (keyed by the run seed)."""
    transport = InProcess(WORKLOAD, setup, "fast")
    for party in WORKLOAD.clients(setup):
        transport.nodes[party] = _node(party, setup, key)
    return transport


def run_commits(setup=SETUP, key=KEY) -> tuple[list[Commit], Outcome]:
    """The workload's run in process with the parties holding ``key``: every commit (record, centers, privacy)."""
    commits: list[Commit] = []
    outcome = drive(WORKLOAD.protocol(setup, WORKLOAD.load_server(setup), Committed()), _honest(setup, key),
                    lambda step: commits.append(step) or dict(step.record))
    return commits, outcome


def by_hand(setup, r: int, key=KEY) -> dict[str, Any]:
    """Repetition ``r`` as direct calls of the core's functions in the order of docs/vertical_kmeans.md §3.2, §18.

    Seed ``setup.seed + r − 1``, hash key K_r of ``key``; every message goes through its flat arrays
    and reaches the server in reverse party order (arrival order does not matter); the offline
    evaluation of §16 runs on the server's data. Returns the centers, weights and what a record holds.
    """
    data, cfg, seed, server = setup.data, setup.kmeans, setup.seed + r - 1, WORKLOAD.load_server(setup)
    out: dict[str, Any] = {"kprimes": (), "n_hat": None, "weights": None, "true_weights": None}
    if cfg.method in CENTRAL_METHODS:
        out["centers"], out["privacy"] = central_run(server, cfg, seed=seed)
    else:
        counter, eps0 = count_party(seed, data.parties), count_epsilon(cfg)
        n_hat = party_count(data.blocks[counter], eps0, party_rng(seed, counter, "count"))
        kprime, budget = server_kprime(cfg, n_hat, data.parties), budget_for(cfg, n_hat, data.parties)
        hash_key = key.repetition_key(setup.digest, r) if cfg.method in SKETCH_METHODS else None
        arrived = [PartyMessage.from_arrays(ell, party_encode(data.blocks[ell], data.ids, ell, cfg, kprime, budget,
                                                              hash_key, seed=seed).to_arrays())
                   for ell in reversed(range(data.parties))]
        weights = server_weights(arrived, n_hat, cfg, budget, seed=seed)
        messages = arrived[::-1]  # party order
        kprimes = tuple(m.k for m in messages)
        out.update(centers=server_centers(arrived, weights, cfg, seed=seed), weights=weights, kprimes=kprimes,
                   n_hat=n_hat if eps0 > 0 else None, privacy=privacy_record(cfg, budget, data.parties),
                   true_weights=exact_weights([assign(b, m.centers) for b, m in zip(data.blocks, messages, strict=True)],
                                              kprimes))
    out["metrics"] = evaluate(server, cfg, out["centers"], seed=seed, weights=out["weights"],
                              true_weights=out["true_weights"])
    return out
