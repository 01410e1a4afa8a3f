"""The distribution query's steps (fedpriv.estimation.query): per-user streams, chunking, the ledger."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.accounting import PrivacyLedger
from fedpriv.estimation.distribution import get_method
from fedpriv.estimation.query import PURPOSE, check_client_ids, perturb_rows, query_ledger
from fedpriv.rng import SERVER, RowStreams, stream

SEED = 5
N = 24
D = 16
EPS = 1.5


def beta_values(n: int, seed: int = 0) -> np.ndarray:
    return stream(seed, 0, 0, "test-data").beta(5.0, 2.0, n)


VALUES = beta_values(N)
METHOD = get_method("sw-ems", EPS, D)


def assert_same_reports(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


# --------------------------------------------------------------------------- the users' reports


def test_rows_are_the_users_own_streams_and_chunking_changes_nothing():
    ids = np.array([9, 2, 40, 7, 3])
    values = VALUES[:5]
    whole = perturb_rows(METHOD, values, ids, seed=SEED, query=2)
    chunked = perturb_rows(METHOD, values, ids, seed=SEED, query=2, chunk_size=2)
    assert_same_reports(whole, chunked)
    for i, c in enumerate(ids):
        alone = METHOD.perturb(values[i:i + 1], RowStreams([stream(SEED, 2, int(c), PURPOSE)]))
        for k in whole:
            np.testing.assert_array_equal(whole[k][i:i + 1], alone[k])
    other = perturb_rows(METHOD, values, ids, seed=SEED, query=3)
    assert any(not np.array_equal(whole[k], other[k]) for k in whole)  # another query, fresh randomness


def test_default_ids_are_the_row_numbers():
    np.testing.assert_array_equal(check_client_ids(None, N), np.arange(N))
    assert_same_reports(perturb_rows(METHOD, VALUES, None, seed=SEED, chunk_size=5),
                        perturb_rows(METHOD, VALUES, np.arange(N), seed=SEED))


def test_batch_streams_draw_every_user_from_one_server_stream():
    batch = perturb_rows(METHOD, VALUES, None, seed=SEED, streams="batch")
    alone = METHOD.perturb(VALUES, stream(SEED, 0, SERVER, PURPOSE))
    assert_same_reports(batch, alone)
    keyed = perturb_rows(METHOD, VALUES, None, seed=SEED)
    assert any(not np.array_equal(batch[k], keyed[k]) for k in alone)


@pytest.mark.parametrize("kwargs, match", [
    ({"streams": "per-query"}, "streams must be one of 'per-user', 'batch', got 'per-query'"),
    ({"values": np.array([0.1, 1.2, -0.3, 2.0])}, r"values must lie in the domain \[0, 1\], got 3 value\(s\) outside"),
    ({"values": np.zeros((2, 2))}, "values must be a 1-D array"),
    ({"values": np.array([])}, "values must be a non-empty array"),
    ({"client_ids": [0, 1, 1]}, r"client_ids must be distinct .* got 1 repeated id"),
    ({"client_ids": [0, 1]}, r"client_ids must hold one id per value \(3\)"),
    ({"client_ids": [0, -1, 2]}, "client_ids must be >= 0, got -1"),
    ({"seed": -1}, "seed must be >= 0, got -1"),
    ({"query": -2}, "query must be >= 0, got -2"),
    ({"chunk_size": 0}, "chunk_size must be >= 1, got 0"),
])
def test_perturb_rows_errors(kwargs, match):
    args = {"values": np.array([0.1, 0.5, 0.9]), "client_ids": None, "seed": SEED, **kwargs}
    values, client_ids = args.pop("values"), args.pop("client_ids")
    with pytest.raises(ValueError, match=match):
        perturb_rows(METHOD, values, client_ids, **args)


def test_perturb_rows_rejects_a_method_that_is_not_a_distribution_method():
    with pytest.raises(TypeError, match="method must be a DistributionMethod"):
        perturb_rows("sw-ems", VALUES, None, seed=SEED)


def test_query_ledger_charges_epsilon_per_query_and_composes_sequentially():
    ledger = query_ledger(METHOD, [0, 1, 2, 3], 0)
    assert ledger.kind == "ldp" and ledger.num_clients == 4
    assert ledger.totals()["epsilon_total_max"] == EPS
    query_ledger(METHOD, [1, 3], 1, ledger=ledger)
    totals = ledger.totals()
    assert totals["per_client_epsilon"] == {"0": EPS, "1": 2 * EPS, "2": EPS, "3": 2 * EPS}
    assert totals["epsilon_total_max"] == 2 * EPS and totals["delta_total"] == 0.0
    assert totals["composition"] == "sequential (pure epsilon)"
    with pytest.raises(ValueError, match="server_round must increase, got 1 after 1"):
        query_ledger(METHOD, [0], 1, ledger=ledger)
    with pytest.raises(ValueError, match="num_clients applies to a new ledger only"):
        query_ledger(METHOD, [0], 2, ledger=ledger, num_clients=9)
    with pytest.raises(ValueError, match="ledger must be a PrivacyLedger of kind 'ldp'"):
        query_ledger(METHOD, [0], 2, ledger=PrivacyLedger(kind="none", num_clients=1))
    with pytest.raises(ValueError, match="num_clients must be >= 4, got 2"):
        query_ledger(METHOD, [0, 3], 0, num_clients=2)
    with pytest.raises(ValueError, match="client_ids must be a non-empty 1-D array"):
        query_ledger(METHOD, [], 0)
