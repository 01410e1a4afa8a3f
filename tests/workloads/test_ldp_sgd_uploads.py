"""The ldp-sgd server's upload checks on a stacked block: each bad row rejected with its reason, the rest kept."""

from __future__ import annotations

import numpy as np

from fedpriv.workloads.ldp_sgd.contract import ARRAYS, CLIENT_ID, METRICS, NUM_EXAMPLES, PARAMS
from fedpriv.workloads.ldp_sgd.server import valid_uploads
from fedpriv.workloads.protocol import Batch

D = 6


def _batch(block: np.ndarray, senders: list[int], counts: list[int]) -> Batch:
    clients = np.arange(10, 10 + len(senders), dtype=np.int64)
    return Batch(clients=clients, records={ARRAYS: {PARAMS: block},
                                           METRICS: {CLIENT_ID: np.asarray(senders, dtype=np.int64),
                                                     NUM_EXAMPLES: np.asarray(counts, dtype=np.int64)}})


def test_bad_rows_of_a_block_are_rejected_by_name_and_the_others_kept() -> None:
    block = np.random.default_rng(0).normal(size=(5, D)).astype(np.float32)
    block[1, 2], block[3, 0] = np.nan, np.inf
    kept = valid_uploads(_batch(block, [10, 11, 12, 13, 99], [4, 4, 0, 4, 4]), D, oracle=False)
    assert kept.clients.tolist() == [10]
    assert np.array_equal(kept.records[ARRAYS][PARAMS], block[:1])
    assert kept.rejected[11] == "non-finite values: 1 NaN and 0 inf of 6"
    assert kept.rejected[13] == "non-finite values: 0 NaN and 1 inf of 6"
    assert kept.rejected[12] == f"{NUM_EXAMPLES} must be an int > 0, got 0"
    assert kept.rejected[14] == f"{CLIENT_ID} 99 is not the sender's (14)"


def test_a_block_of_the_wrong_width_rejects_every_row_with_the_shape() -> None:
    block = np.zeros((2, D + 1), dtype=np.float32)
    kept = valid_uploads(_batch(block, [10, 11], [3, 3]), D, oracle=False)
    assert len(kept) == 0
    assert all(r == f"wrong shape: expected ({D},), got ({D + 1},)" for r in kept.rejected.values())
