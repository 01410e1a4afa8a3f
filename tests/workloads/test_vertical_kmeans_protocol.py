"""The vertical k-means workload: the server protocol against honest, corrupt, refusing and lost parties."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.clustering.methods import count_epsilon
from fedpriv.rundir import Committed
from fedpriv.workloads import Arrays, Config, Reply
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.protocol import drive
from fedpriv.workloads.vertical_kmeans.contract import N_HAT, PARTY_INFO, PARTY_MESSAGE
from tests.workloads._vertical_kmeans import (
    KEY,
    SECRET,
    SETUP,
    WORKLOAD,
    _ask,
    _encode,
    _honest,
    _node,
    _setup,
    by_hand,
)

# --------------------------------------------------------------------------- the server protocol


def _protocol(exchange, setup=SETUP, committed=None):
    """Run the protocol with ``exchange`` into memory: the committed records and the outcome."""
    records = []

    def commit(step):
        records.append(dict(step.record))
        return dict(step.record)

    server = WORKLOAD.load_server(setup)
    return records, drive(WORKLOAD.protocol(setup, server, committed or Committed()), exchange, commit)


@pytest.mark.parametrize("method, parties", [
    ("dpfmps-2pest", 2), ("dpfmps-2pest", 3), ("dpfmps-basic", 3), ("ind-lap", 2), ("ldp-agg-2pest", 3),
    ("ldp-agg", 2), ("vfl-kmeans", 2), ("kmeans+dpfmps-2pest", 2), ("dplsf+exact", 2), ("central-dplsf", 2),
    ("central-kmeans", 2),
])
def test_the_protocol_releases_what_the_core_functions_compute(method, parties):
    """Each repetition releases what the core's party and server functions compute in the order of §18."""
    setup = _setup(**{"kmeans-method": method, "parties": parties, "kmeans-samples": 900, "sketch-repetitions": 128,
                      "epsilon": 3.0, "repetitions": 2})
    records, outcome = _protocol(_honest(setup), setup)
    assert outcome.error is None and len(records) == 2
    for r, record in enumerate(records, start=1):
        expected = by_hand(setup, r)
        m = expected["metrics"]
        assert (record["cost"], record["cost-ratio"], record["v-measure"], record["relative-error"]) == (
            m["cost"], m["cost_ratio"], m["v_measure"], m.get("relative_error"))
        assert (tuple(record["kprime"]), record["n-hat"], record["epsilon-total"], record["delta-total"]) == (
            expected["kprimes"], expected["n_hat"], expected["privacy"]["epsilon"], expected["privacy"]["delta"])
    np.testing.assert_array_equal(outcome.arrays["centers"], expected["centers"])
    assert outcome.info["privacy"] == expected["privacy"]


def test_a_central_baseline_sends_no_message():
    def refuse(requests):
        raise AssertionError(f"a central baseline sent {len(requests)} requests")

    records, outcome = _protocol(refuse, _setup(**{"kmeans-method": "central-kmeans"}))
    assert outcome.error is None and [r["cost-ratio"] for r in records] == [1.0, 1.0, 1.0]


def test_no_request_holds_the_key():
    sent = []
    honest = _honest()

    def recording(requests):
        sent.extend(requests)
        return honest(requests)

    records, outcome = _protocol(recording)
    assert outcome.error is None and len(sent) == 3 * (1 + 2)  # per repetition: one count, one encode per party
    secrets = [SECRET, *(KEY.repetition_key(SETUP.digest, r)._secret for r in (1, 2, 3))]  # noqa: SLF001
    for request in sent:
        assert set(request.message.records) == {"config"}
        for value in request.message["config"].values():
            assert isinstance(value, (int, float, str)) and not isinstance(value, bytes)
            assert not any(s.hex() in str(value) for s in secrets)


def test_no_reply_holds_the_key():
    node = _node(0)
    replies = [_ask(node, op="count", repetition=1, eps0=count_epsilon(SETUP.kmeans))]
    replies.append(_encode(node, n_hat=replies[0]["metrics"][N_HAT]))
    secrets = [SECRET, KEY.repetition_key(SETUP.digest, 1)._secret]  # noqa: SLF001
    for reply in replies:
        for name, record in reply.records.items():
            if isinstance(record, Arrays):
                for arr in record.values():
                    blob = np.ascontiguousarray(arr).tobytes()
                    assert not any(s in blob or s[:16] in blob for s in secrets), name
            else:
                text = repr(dict(record))
                assert not any(s.hex() in text or repr(s) in text for s in secrets), name


def _corrupt(repetition: int, party: int, change):
    """An exchange whose party ``party`` answers its encode of ``repetition`` changed by ``change(message)``."""
    honest = _honest()

    def exchange(requests):
        replies = honest(requests)
        out = []
        for req, rep in zip(requests, replies, strict=True):
            fields = req.message["config"]
            if fields["op"] == "encode" and fields["repetition"] == repetition and rep.client == party:
                rep = Reply(client=rep.client, message=change(rep.message))
            out.append(rep)
        return out

    return exchange


def _with(message, name, **entries):
    records = dict(message.records)
    records[name] = type(records[name])({**records[name], **entries})
    return Message_(records)


@pytest.mark.parametrize("change, fragment", [
    (lambda m: _with(m, PARTY_MESSAGE, centers=np.full_like(m[PARTY_MESSAGE]["centers"], np.nan)),
     "party 1's encode reply is malformed: centers must be finite"),
    (lambda m: _with(m, PARTY_INFO, party=0), "party 1's encode reply says party 0, repetition 2"),
    (lambda m: _with(m, PARTY_INFO, repetition=1), "party 1's encode reply says party 1, repetition 1"),
    (lambda m: Message_({PARTY_MESSAGE: m[PARTY_MESSAGE]}), "must hold 'party-message' and 'party'"),
    (lambda m: _with(m, PARTY_MESSAGE, sketch=m[PARTY_MESSAGE]["sketch"][:10]),
     "the parties' encode replies do not fit together"),
    (lambda m: _with(m, PARTY_MESSAGE, centers=np.zeros((3, 7))), "expected 4 columns and at most k' = "),
    (lambda m: _with(m, PARTY_MESSAGE, secret=np.zeros(2)), "party 1's encode reply is malformed: arrays must hold"),
])
def test_a_malformed_encode_reply_stops_the_run_and_keeps_the_finished_repetitions(change, fragment):
    records, outcome = _protocol(_corrupt(2, 1, change))
    assert [r["round"] for r in records] == [1]
    assert outcome.error.startswith("repetition 2: ") and fragment in outcome.error, outcome.error


def test_a_bad_count_reply_stops_the_run():
    honest = _honest()

    def exchange(requests):
        replies = honest(requests)
        if requests[0].message["config"]["op"] == "count":
            return [Reply(client=r.client, message=Message_({"metrics": Config({N_HAT: float("inf"), "repetition": 1})}))
                    for r in replies]
        return replies

    records, outcome = _protocol(exchange)
    assert records == [] and "repetition 1: party" in outcome.error and "count reply must hold a finite" in outcome.error


def test_a_refusing_or_lost_party_stops_the_run_with_its_reason():
    stingy = _setup(epsilon=1.0)  # the parties hold a smaller budget than the server assumes
    transport = InProcess(WORKLOAD, stingy, "fast")
    records, outcome = _protocol(transport)
    assert records == [] and "repetition 1: party" in outcome.error
    assert "did not answer the count round: Refusal: expected eps0 = 0.02" in outcome.error
    honest = _honest()

    def losing(requests):
        replies = honest(requests)
        if requests[0].message["config"]["op"] == "encode" and requests[0].message["config"]["repetition"] == 3:
            replies[0] = Reply(client=replies[0].client, error="no reply within 600 s (the node was lost or is hung)")
        return replies

    records, outcome = _protocol(losing)
    assert [r["round"] for r in records] == [1, 2]
    assert outcome.error == ("repetition 3: party 0 did not answer the encode round: no reply within 600 s (the node "
                             "was lost or is hung)")


def test_resume_starts_after_the_committed_repetition():
    records, outcome = _protocol(_honest())
    committed = Committed(round=1, records=records[:1], state={"privacy": outcome.info["privacy"]})
    rest, again = _protocol(_honest(), committed=committed)
    assert [r["round"] for r in rest] == [2, 3]
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in (*records[:1], *rest)]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in records]
    done, nothing = _protocol(_honest(), committed=Committed(round=3, records=records,
                                                              state={"privacy": outcome.info["privacy"]}))
    assert done == [] and nothing.info["privacy"] == outcome.info["privacy"]
