"""Shared setup of the vertical k-means workload tests: the run, its setup, and a party's node and requests."""

from __future__ import annotations

from fedpriv.clustering.methods import count_epsilon
from fedpriv.config import RunConfig
from fedpriv.node.policy import NodePolicy
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.workloads import Config, Node, Request, get_workload
from fedpriv.workloads import Message as Message_
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
