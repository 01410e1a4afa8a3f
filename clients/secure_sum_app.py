"""The secure-sum ClientApp: one client's round-1 or round-2 report behind :class:`SecAggMod` (federated_mf.md §6.3).

The Flower twin of :func:`fedpriv.secagg.task.run_secure_sum` (client side). ``@app.query`` answers
the server's question for this node's client id (``MetricRecord {"client-id": partition-id}``, as in
:mod:`clients.app`). ``@app.train`` computes this client's report with the same fedpriv functions
the in-process run uses, for ``k = 1`` (bit-identical to its row of the batched call):

* round 1: ``G_i + ξ_i`` (:func:`~fedpriv.secagg.noise.round1_reports` of the client's clipped vector),
* round 2: ``ξ̄_i = −ξ_i + ξ'_i`` (:func:`~fedpriv.secagg.noise.round2_reports` with the round-1
  survivor count ``n1`` the server sends),

from the message's ConfigRecord ``"config"`` (``iteration``, ``round``, and ``n1`` for round 2), and
replies the vector in the ArrayRecord ``"secagg-input"``/``"vector"``.

Noise seeds (``noise_seed``): ``"run"`` (default, simulation) keys the noise shares by the run
seed, so the Flower run equals the in-process one bit for bit — but a server that knows the run
seed can recompute every share and strip the noise. ``"secret"`` (deployment against a curious
server) draws a fresh 63-bit seed from the OS CSPRNG per iteration, keeps it in the node's own
``context.state`` between the two rounds (round 2 must cancel round 1's share) and never sends it. That reply never leaves the
node in the clear: :class:`~clients.secagg_mod.SecAggMod` (installed as the app's mod) masks it
(protocol) — only the simulation-only oracle stage forwards it as is.
"""

from __future__ import annotations

import os

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients.contract import CLIENT_ID, CONFIG, METRICS
from clients.secagg_mod import INPUT, SecAggMod, input_record
from fedpriv._validation import check_choice
from fedpriv.secagg.noise import round1_reports, round2_reports
from fedpriv.secagg.task import SecureSumSpec, client_signals, noise_for

__all__ = ["ITERATION", "N1", "NOISE_SEEDS", "ROUND", "make_secure_sum_client_app"]

# ConfigRecord CONFIG keys of a secure-sum train message
ITERATION, ROUND, N1 = "iteration", "round", "n1"
#: Where to take the noise shares' seed from: the run seed (simulation) or a per-iteration secret.
NOISE_SEEDS: tuple[str, ...] = ("run", "secret")
_SECRET_SEEDS = "secure-sum-noise-seeds"  # context.state ConfigRecord: str(iteration) -> secret seed


def _secret_seed(context: Context, iteration: int, rnd: int) -> int:
    """This node's secret noise seed of ``iteration``: drawn from the OS in round 1, reused in round 2."""
    seeds = context.state.config_records.get(_SECRET_SEEDS)
    if seeds is None:
        seeds = context.state.config_records[_SECRET_SEEDS] = ConfigRecord({})
    key = str(iteration)
    if rnd == 1:
        for old in [k for k in seeds if k != key]:  # an earlier iteration's seed is no longer needed
            del seeds[old]
        seeds[key] = int.from_bytes(os.urandom(8), "little") >> 1
    elif key not in seeds:
        raise ValueError(f"round 2 of iteration {iteration} needs this node's round-1 secret noise seed, which it "
                         "does not hold (round 1 ran on another node or the node restarted): the report would not "
                         "cancel its round-1 share")
    return int(seeds[key])


def _partition_id(context: Context) -> int:
    """This node's client id (``node_config["partition-id"]``)."""
    if "partition-id" not in context.node_config:
        raise ValueError("node_config lacks 'partition-id' (start the SuperNode with --node-config \"partition-id=...\")")
    return int(context.node_config["partition-id"])


def make_secure_sum_client_app(spec: SecureSumSpec, *, noise_seed: str = "run") -> ClientApp:
    """A ClientApp (with :class:`SecAggMod`) whose train handler replies this client's report for ``spec``."""
    if not isinstance(spec, SecureSumSpec):
        raise TypeError(f"spec must be a SecureSumSpec, got {type(spec).__name__}")
    check_choice(noise_seed, "noise_seed", NOISE_SEEDS)
    noise = noise_for(spec)  # σ calibrated once, here, not per message
    app = ClientApp(mods=[SecAggMod()])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        """This client's round-1 or round-2 report (spec §6.3) as ``secagg-input``/``vector``."""
        cid = _partition_id(context)
        cfg = msg.content.config_records.get(CONFIG, ConfigRecord())
        iteration, rnd = cfg.get(ITERATION), cfg.get(ROUND)
        if not isinstance(iteration, int) or rnd not in (1, 2):
            raise ValueError(f"the train message's ConfigRecord {CONFIG!r} must hold an int {ITERATION!r} and "
                             f"{ROUND!r} in (1, 2), got {ITERATION}={iteration!r}, {ROUND}={rnd!r}")
        seed = spec.seed if noise_seed == "run" else _secret_seed(context, iteration, rnd)
        if rnd == 1:
            report = round1_reports(client_signals(spec, [cid]), [cid], noise, seed=seed, iteration=iteration)
        else:
            n1 = cfg.get(N1)
            if not isinstance(n1, int):
                raise ValueError(f"a round-2 message must carry the int {N1!r} (round-1 survivors), got {n1!r}")
            report = round2_reports([cid], spec.dim, n1, noise, seed=seed, iteration=iteration)
        return Message(RecordDict({INPUT: input_record(report[0])}), reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """Tell the server this node's client id (Flower's node ids are random)."""
        return Message(RecordDict({METRICS: MetricRecord({CLIENT_ID: _partition_id(context)})}), reply_to=msg)

    return app
