"""Masking graphs: the Harary structure, public randomness, the auto rule, overrides and the stated guarantee."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.secagg.bounds import harary_parameters
from fedpriv.secagg.graph import (
    AUTO_HARARY_MIN_CLIENTS,
    THREAT_MODEL,
    GraphPolicy,
    MaskingGraph,
)


@pytest.mark.parametrize("n, k", [(9, 2), (12, 4), (50, 10), (101, 100)])
def test_harary_graph_is_k_regular_symmetric_and_a_relabelled_ring(n: int, k: int) -> None:
    g = MaskingGraph("harary", k, 2, seed=4)
    nb = g.neighbour_positions(n, instance=3)
    assert nb.shape == (n, k)
    adj = np.zeros((n, n), dtype=bool)
    adj[np.repeat(np.arange(n), k), nb.ravel()] = True
    assert adj.sum(axis=1).tolist() == [k] * n and not adj.diagonal().any() and (adj == adj.T).all()
    ring = g.ring(n, instance=3)  # ring[p] is the client at ring position p: neighbours are p ± 1..k/2
    for p in (0, n // 2, n - 1):
        want = {ring[(p + o) % n] for o in range(-(k // 2), k // 2 + 1) if o}
        assert set(nb[ring[p]].tolist()) == want


def test_harary_graph_comes_from_public_randomness() -> None:
    g = MaskingGraph("harary", 6, 3, seed=4)
    same = MaskingGraph("harary", 6, 3, seed=4).neighbour_positions(40, instance=7)
    np.testing.assert_array_equal(g.neighbour_positions(40, instance=7), same)
    assert not np.array_equal(g.neighbour_positions(40, instance=8), same)
    assert not np.array_equal(MaskingGraph("harary", 6, 3, seed=5).neighbour_positions(40, instance=7), same)
    complete = MaskingGraph.complete(5, 4)
    assert complete.neighbour_positions(5, instance=0).tolist()[2] == [0, 1, 3, 4]


def test_auto_uses_harary_from_100_clients_on() -> None:
    auto = GraphPolicy()
    assert AUTO_HARARY_MIN_CLIENTS == 100
    assert auto.kind(99, 0.3) == "complete" and auto.kind(100, 0.3) == "harary"
    g = auto.guarantee(1000, 0.3)
    best = harary_parameters(1000, corrupt_fraction=0.05, dropout_fraction=0.3)
    assert (g.graph, g.degree, g.share_threshold) == ("harary", best.degree, best.share_threshold)
    assert g.survivor_threshold == 700 and g.max_corrupt_clients == 50
    assert g.security_bits >= 40 and g.correctness_bits >= 20
    # infeasible for the sparse graph (γ + ω near 1): auto falls back to the complete graph
    assert GraphPolicy(corrupt_fraction=0.49).kind(100, 0.5) == "complete"


def test_complete_guarantee_is_deterministic_and_needs_fewer_than_t_colluders() -> None:
    g = GraphPolicy(graph="complete").guarantee(10, 0.3)
    assert (g.degree, g.share_threshold, g.security_bits, g.correctness_bits) == (9, 7, math.inf, math.inf)
    with pytest.raises(ValueError, match="⌊γn⌋ < t = ⌈\\(1−ω\\)n⌉ for the complete graph .* got ⌊γn⌋ = 7, t = 7"):
        GraphPolicy(graph="complete", corrupt_fraction=0.7).guarantee(10, 0.3)


def test_guarantee_states_the_threat_model() -> None:
    g = GraphPolicy(graph="harary").guarantee(200, 0.3)
    assert g.threat_model == THREAT_MODEL and "honest-but-curious server" in g.threat_model
    assert "at most max_corrupt_clients corrupted clients" in g.threat_model and "active server" in g.threat_model
    assert g.as_dict()["max_corrupt_clients"] == 10 and g.as_dict()["graph"] == "harary"


def test_overrides_keep_security_and_report_correctness() -> None:
    ok = GraphPolicy(graph="harary", degree=10, share_threshold=8, corrupt_fraction=0.0)
    g = ok.guarantee(30, 0.2)
    assert (g.degree, g.share_threshold) == (10, 8) and g.security_bits == math.inf and g.correctness_bits < 20
    t_only = GraphPolicy(graph="harary", degree=40).guarantee(1000, 0.3)  # t: smallest meeting σ for k = 40
    assert t_only.degree == 40 and t_only.security_bits >= 40
    graph, same = GraphPolicy(graph="harary", degree=40).resolve(1000, 0.3, seed=9)
    assert (graph.kind, graph.degree, graph.share_threshold, graph.seed) == ("harary", 40, t_only.share_threshold, 9)
    with pytest.raises(ValueError, match="give statistical security 2\\^-.* security_bits = 40.0 needs a larger degree"):
        GraphPolicy(graph="harary", degree=4).guarantee(1000, 0.3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"graph": "ring"}, "graph must be one of"),
        ({"degree": 3, "graph": "harary"}, "degree must be even"),
        ({"degree": 4}, "overrides need graph = 'harary', got graph = 'auto'"),
        ({"share_threshold": 4, "graph": "complete"}, "overrides need graph = 'harary'"),
        ({"corrupt_fraction": 1.0}, "corrupt_fraction must be in \\[0, 1\\)"),
        ({"security_bits": 0}, "security_bits must be > 0"),
    ],
)
def test_policy_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GraphPolicy(**kwargs)


def test_resolve_errors() -> None:
    with pytest.raises(ValueError, match="no Harary degree k < n − 1 = 19 meets"):
        GraphPolicy(graph="harary", corrupt_fraction=0.45).guarantee(20, 0.5)
    with pytest.raises(ValueError, match="degree must be <= n − 1 = 9"):
        GraphPolicy(graph="harary", degree=12).guarantee(10, 0.3)
    with pytest.raises(ValueError, match="degree must be even"):
        MaskingGraph("harary", 5, 2)
