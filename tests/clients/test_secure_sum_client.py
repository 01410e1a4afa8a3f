"""The secure-sum ClientApp's noise seeds: the run seed (simulation) or a per-iteration secret kept on the node."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from clients.contract import CONFIG
from clients.secagg_mod import INPUT, INPUT_VECTOR
from clients.secure_sum_app import ITERATION, N1, ROUND, make_secure_sum_client_app
from fedpriv.secagg.noise import round1_reports, round2_reports
from fedpriv.secagg.task import SecureSumSpec, client_signals, noise_for
from tests.strategies._flower import context

SPEC = SecureSumSpec(num_clients=6, dim=16, omega=0.3, seed=3)
CID = 2


def report(app, ctx, rnd: int, n1: int | None = None, iteration: int = 0) -> np.ndarray:
    """The clear report the train handler gives the mod (no ``secagg`` record: the mod passes it through)."""
    cfg = {ITERATION: iteration, ROUND: rnd, **({N1: n1} if n1 is not None else {})}
    reply = app(Message(RecordDict({CONFIG: ConfigRecord(cfg)}), 1, MessageType.TRAIN), ctx)
    assert set(reply.content) == {INPUT}  # nothing else leaves the handler: no seed
    return reply.content[INPUT][INPUT_VECTOR].numpy()


def test_run_seed_reports_are_the_in_process_rows():
    app, ctx = make_secure_sum_client_app(SPEC), context(CID, SPEC.num_clients)
    noise, signal = noise_for(SPEC), client_signals(SPEC, [CID])
    np.testing.assert_array_equal(report(app, ctx, 1),
                                  round1_reports(signal, [CID], noise, seed=SPEC.seed, iteration=0)[0])
    np.testing.assert_array_equal(report(app, ctx, 2, n1=5),
                                  round2_reports([CID], SPEC.dim, 5, noise, seed=SPEC.seed, iteration=0)[0])


def test_secret_seed_is_fresh_per_node_kept_between_rounds_and_cancels_round_one():
    app = make_secure_sum_client_app(SPEC, noise_seed="secret")
    noise, signal = noise_for(SPEC), client_signals(SPEC, [CID])
    ctx_a, ctx_b = context(CID, SPEC.num_clients), context(CID, SPEC.num_clients)
    r1_a, r1_b = report(app, ctx_a, 1), report(app, ctx_b, 1)
    run_seed_r1 = round1_reports(signal, [CID], noise, seed=SPEC.seed, iteration=0)[0]
    assert not np.array_equal(r1_a, r1_b) and not np.array_equal(r1_a, run_seed_r1)
    secret = int(ctx_a.state.config_records["secure-sum-noise-seeds"]["0"])
    np.testing.assert_array_equal(r1_a, round1_reports(signal, [CID], noise, seed=secret, iteration=0)[0])
    r2_a = report(app, ctx_a, 2, n1=5)
    np.testing.assert_array_equal(r2_a, round2_reports([CID], SPEC.dim, 5, noise, seed=secret, iteration=0)[0])
    # round 1 + round 2 = signal + ξ' only: the round-1 share cancels exactly
    fresh = round2_reports([CID], SPEC.dim, 5, noise, seed=secret, iteration=0)[0] + \
        round1_reports(np.zeros_like(signal), [CID], noise, seed=secret, iteration=0)[0]
    np.testing.assert_allclose(r1_a + r2_a - signal[0], fresh, rtol=0, atol=1e-12)


def test_secret_round_two_without_round_one_on_this_node_is_refused():
    app = make_secure_sum_client_app(SPEC, noise_seed="secret")
    with pytest.raises(ValueError, match="round-1 secret noise seed"):
        report(app, context(CID, SPEC.num_clients), 2, n1=5)


def test_noise_seed_must_be_known():
    with pytest.raises(ValueError, match="noise_seed must be one of 'run', 'secret', got 'server'"):
        make_secure_sum_client_app(SPEC, noise_seed="server")
