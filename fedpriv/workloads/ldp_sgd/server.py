"""The server side of federated LDP-SGD: sample, broadcast the model, validate, aggregate, analyze, evaluate, commit.

Round r: the keyed sample of clients (:func:`fedpriv.federated.sampling.sample_clients`) gets the
global model; the replies are validated (:func:`valid_uploads`: the privatized parameters must be a
finite float vector of the model's length, with a client id that is the sender's and a positive
example count — a bad reply is *rejected* and counted, an error reply *failed*), and a round with
fewer than ``min-clients`` valid replies stops the run with the reasons (the committed rounds stay).
The valid uploads, in client-id order, are aggregated by the configured rule
(:func:`fedpriv.federated.aggregate.aggregate`; a round whose number of valid replies breaks the rule's
assumption on ``num-malicious`` stops the run, :func:`fedpriv.federated.aggregate.assumption_violation`;
``centeredclip`` starts from the previous round's aggregated update, committed with the model so a
resumed run continues exactly), the server-side analysis predicts (and, with the
simulation oracle, measures) the noise-induced deviation and may re-calibrate, the new model is
evaluated on the held-out test set (and, for the backdoor, on the triggered test inputs) every
``evaluate-every`` rounds and at the last round, each participating client's spend is charged in the privacy
ledger (:func:`fedpriv.results.round_spend`) and the round is committed: its metrics line, the
model and the ledger.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedpriv.accounting import PrivacyLedger
from fedpriv.attacks.backdoor import attack_success_rate
from fedpriv.attacks.selection import is_attacker
from fedpriv.federated.aggregate import aggregate, assumption_violation, validate_update
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.rules import get_rule, rule_arguments
from fedpriv.federated.sampling import sample_clients
from fedpriv.federated.server_analysis import RoundInputs, ServerAnalysis
from fedpriv.models import evaluate
from fedpriv.perturbation import Perturbation
from fedpriv.results import make_ledger, round_spend
from fedpriv.rundir import Committed, RunDirectoryError
from fedpriv.workloads.ldp_sgd.contract import (
    ARRAYS,
    CLIENT_ID,
    METRICS,
    NUM_EXAMPLES,
    ORACLE_CLEAN,
    PARAMS,
    train_request,
)
from fedpriv.workloads.protocol import Batch, Broadcast, Commit, Outcome, ProtocolError, Step

__all__ = ["RULE_STATE", "Server", "serve", "valid_uploads"]

#: The committed array holding what the aggregation rule carries to the next round (``AggregationRule.carry``:
#: centered clipping's start point); resume restores it.
RULE_STATE = "rule-state"


@dataclass(frozen=True)
class Server:
    """What the server holds: the model architecture and initial model, the test set, the analysis, the perturbation."""

    model: nn.Module
    initial: np.ndarray
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    analysis: ServerAnalysis | None
    perturbation: Perturbation
    #: The triggered test inputs of the backdoor's success rate and its target (None: not measured).
    x_triggered: torch.Tensor | None = None
    backdoor_target: int = 0

    @property
    def dim(self) -> int:
        """Number of model parameters d."""
        return int(self.initial.size)

    def evaluate(self, params: np.ndarray) -> dict[str, float]:
        """Server-side evaluation on the held-out test set."""
        return evaluate(self.model, self.x_test, self.y_test, num_classes=self.num_classes,
                        params=torch.from_numpy(np.asarray(params, dtype=np.float32)))

    def backdoor(self, params: np.ndarray) -> dict[str, float]:
        """``{"backdoor-asr": ...}``, the attack success rate on the triggered test inputs, when it is measured."""
        if self.x_triggered is None:
            return {}
        return {"backdoor-asr": attack_success_rate(self.model, self.x_triggered, target=self.backdoor_target,
                                                    num_classes=self.num_classes,
                                                    params=torch.from_numpy(np.asarray(params, dtype=np.float32)))}


def evaluated(config: LdpSgdConfig, server_round: int) -> bool:
    """Whether the server tests the model of ``server_round`` (every ``evaluate-every`` rounds and the last)."""
    return server_round % config["evaluate-every"] == 0 or server_round == config.rounds


def _tested(server: Server, params: np.ndarray) -> dict[str, float]:
    """The round's ``test-*`` metrics and, when it is measured, ``backdoor-asr``."""
    return {**{f"test-{k}": v for k, v in server.evaluate(params).items()}, **server.backdoor(params)}


def valid_uploads(batch: Batch, d: int, *, oracle: bool) -> Batch:
    """``batch`` without the replies that break the contract (each rejected with its reason)."""
    if not len(batch):
        return batch
    arrays, metrics = batch.records.get(ARRAYS, {}), batch.records.get(METRICS, {})
    allowed = ({PARAMS}, {PARAMS, ORACLE_CLEAN}) if oracle else ({PARAMS},)
    if set(arrays) not in allowed or not {CLIENT_ID, NUM_EXAMPLES} <= set(metrics):
        return batch.keep(np.zeros(len(batch), dtype=bool),
                          f"expected record {ARRAYS!r} with {PARAMS!r}{' (and ' + repr(ORACLE_CLEAN) + ')' if oracle else ''}"
                          f" and {METRICS!r} with {CLIENT_ID!r} and {NUM_EXAMPLES!r}, got "
                          f"{ {k: sorted(v) for k, v in batch.records.items()} } (is the ldp_mod installed?)")
    ids = np.asarray(batch.clients, dtype=np.int64)
    counts, senders = np.asarray(metrics[NUM_EXAMPLES]), np.asarray(metrics[CLIENT_ID])
    suspect = np.ones(len(ids), dtype=bool)  # every check vectorized over the block ...
    if counts.shape == senders.shape == ids.shape and np.issubdtype(counts.dtype, np.integer):
        suspect = (senders != ids) | (counts <= 0)
    for key in sorted(arrays):
        block = arrays[key]
        if isinstance(block, np.ndarray) and np.issubdtype(block.dtype, np.floating) and block.shape == (len(ids), d):
            suspect |= ~np.isfinite(block).all(axis=1)
        else:
            suspect[:] = True
    reasons = [""] * len(ids)
    for i in np.flatnonzero(suspect).tolist():  # ... and only a flagged row's reason in words
        reason = validate_update(arrays[PARAMS][i], d)
        if reason is None and ORACLE_CLEAN in arrays:
            reason = validate_update(arrays[ORACLE_CLEAN][i], d)
        if reason is None and senders[i] != ids[i]:
            reason = f"{CLIENT_ID} {senders[i].item()!r} is not the sender's ({ids[i]})"
        if reason is None and not (np.issubdtype(counts.dtype, np.integer) and counts[i] > 0):
            reason = f"{NUM_EXAMPLES} must be an int > 0, got {counts[i].item()!r}"
        reasons[i] = reason or ""
    return batch.keep(np.array([r == "" for r in reasons]), reasons)


def _reasons(batch: Batch) -> tuple[list[str], dict[str, int]]:
    """The record's ``failed-reasons`` lines and ``rejected-reasons`` counts."""
    failed = [f"client {c}: {r}"[:200] for c, r in sorted(batch.errors.items())]
    rejected: dict[str, int] = {}
    for reason in batch.rejected.values():
        rejected[reason] = rejected.get(reason, 0) + 1
    return failed, rejected


def serve(config: LdpSgdConfig, server: Server, committed: Committed) -> Generator[Step, Any, Outcome]:
    """Rounds ``committed.round + 1 .. rounds`` (module docstring)."""
    ledger = (PrivacyLedger.from_state_dict(committed.ledger) if committed.ledger is not None
              else make_ledger(config, server.perturbation))
    params = committed.arrays.get("params") if committed.round else server.initial
    if params is None or params.size != server.dim:
        found = "no model" if params is None else f"a model of {params.size} parameters"
        raise RunDirectoryError(f"the last commit holds {found}, the run's model has {server.dim}: it does not "
                                "belong to this run; start a new run")
    oracle = server.analysis is not None and server.analysis.oracle
    rule, rule_args = get_rule(config.strategy), rule_arguments(config)
    rule_state = committed.arrays.get(RULE_STATE) if committed.round else None  # what the rule carries over rounds
    for server_round in range(committed.round + 1, config.rounds + 1):
        start = time.perf_counter()
        chosen = sample_clients(config.seed, server_round, config.num_clients, config.fraction_train,
                                config.min_clients)
        batch: Batch = yield Broadcast(clients=np.asarray(chosen, dtype=np.int64), kind="train",
                                       message=train_request(params, server_round))
        claims = batch.records.get(METRICS, {}).get("privacy-claim")
        voided = claims is not None and bool(np.any(np.asarray(claims) == 0.0))
        batch = valid_uploads(batch, server.dim, oracle=oracle)
        failed, rejected = _reasons(batch)
        if len(batch) < config.min_clients:
            raise ProtocolError(f"round {server_round}: {len(batch)} valid client update(s), fewer than min-clients="
                                f"{config.min_clients} ({len(batch.errors)} failed, {len(batch.rejected)} rejected"
                                f"{': ' + '; '.join((failed + list(rejected))[:5]) if failed or rejected else ''})")
        updates = batch.records[ARRAYS][PARAMS]
        n = np.asarray(batch.records[METRICS][NUM_EXAMPLES], dtype=np.float64)
        weights = np.ones(len(batch)) if config.weights == "uniform" else n
        violation = assumption_violation(config.strategy, len(batch), config.num_malicious, **rule_args)
        if violation is not None:  # the round's actual valid replies, not the expected sample (setup checks that)
            raise ProtocolError(f"round {server_round}: {violation} valid replies ({len(batch.errors)} failed, "
                                f"{len(batch.rejected)} rejected); lower num-malicious or raise min-clients")
        aggregated = aggregate(updates, weights, config.strategy, num_malicious=config.num_malicious,
                               reference=params, state=rule_state, **rule_args)
        rule_state = rule.carry(aggregated, params)  # e.g. centered clipping's next start point
        new_params = aggregated.astype(np.float32)
        analysis: dict[str, float] = {}
        if server.analysis is not None:  # the float64 aggregate, as Flower's LdpFedAvg hands it over
            inputs = RoundInputs(server_round=server_round, global_params=params, updates=updates, weights=weights,
                                 aggregated=aggregated, clean=batch.records[ARRAYS].get(ORACLE_CLEAN) if oracle else None)
            recalibrated, analysis = server.analysis(inputs)
            new_params = recalibrated.astype(np.float32)
        losses = np.asarray(batch.records[METRICS]["train-loss"], dtype=np.float64)
        ids = [int(c) for c in batch.clients]
        spend = round_spend(config, server.perturbation, server.dim, server_round, claims_held=not voided)
        ledger.record(spend, ids, {c: int(k) for c, k in zip(ids, n)})
        record = {
            "round": server_round,
            "clients": len(batch),
            "client-ids": ids,
            "attackers": int(is_attacker(config, ids).sum()),  # this round's valid replies sent by attackers
            "num-examples": dict(zip(ids, (int(k) for k in n))),
            "failed": len(batch.errors),
            "rejected": len(batch.rejected),
            "rejected-reasons": rejected,
            "failed-reasons": failed,
            "train-loss": float(np.dot(losses, n) / n.sum()),
            "privacy-claim": 0.0 if voided else 1.0,
            **analysis,
            **(_tested(server, new_params) if evaluated(config, server_round) else {}),
            "seconds": time.perf_counter() - start,
            "epsilon-round": spend.epsilon * spend.releases,
            "epsilon-total": ledger.running_max_epsilon(),
            "privacy-claim-holds": spend.holds,
            **({} if spend.holds else {"privacy-caveat": spend.note}),
        }
        yield Commit(record, arrays={"params": new_params, **({} if rule_state is None else {RULE_STATE: rule_state})},
                     ledger=ledger.state_dict())
        params = new_params
    return Outcome(arrays={"params": params})
