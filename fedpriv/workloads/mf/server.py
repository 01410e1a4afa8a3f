"""The server protocols of federated MF: the three-stage party loop (VFL/HFL), LFL-SGDMF, the central baselines.

**Parties** (:func:`serve_parties`, docs/federated_mf.md §2.2, §10): the server draws the shared
embedding (:func:`~fedpriv.mf.fmf.init_shared`), broadcasts it for Stage 1 (the replies carry the
public weights), then per round t = 1..T broadcasts it for training, checks every party's copy
(shape, finite: a malformed copy is never averaged), aggregates and records with
:class:`~fedpriv.mf.fmf.FmfServer` (the bookkeeping the core's ``run_fmf`` uses, in the same order),
asks the parties' test errors on the evaluation channel (unless ``mf-evaluate = "off"``: the records
then carry no test MSE) and commits the round; then Stage 3 and the final errors. Every party takes part in every step (§10.1): a party that fails, is lost or sends a
malformed reply stops the run with :class:`~fedpriv.workloads.protocol.ProtocolError` naming it and
the stage; the committed rounds stay.

**Devices** (:func:`serve_devices`, §6.3): Stage 1 (V⁰ from :class:`~fedpriv.mf.lfl.LflServer`,
every device pre-trains), then per iteration t round 1 over the roster (secure-aggregation
instance 2t, :func:`~fedpriv.workloads.secure_aggregation.secure_sum_steps`) and, for private sgdmf when it
released a sum and ζ₂(n1) exists, round 2 over its survivors (instance 2t + 1); the server's step
(ledger, ``V ← Π_V(V − (γ_t/n1)·S)``) and the devices' test errors; a committed record per
iteration. A device that fails a step is left out from then on (its secure-aggregation instances
count it as dropped, evaluation pools the devices that answered): rounds go on while every
instance stays above its threshold ⌈(1−ω)n⌉ (below it an iteration halts and changes nothing,
§9 A20); the run stops only when no device answers.

**Central** (:func:`serve_central`, §8.5): one trusted party on the full data (in process only):
the core's ``run_central`` on the server's data, each round committed after it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Generator
from typing import Any

import numpy as np

from fedpriv.accounting.parties import PartyAccount
from fedpriv.mf.fmf import FmfServer, composition_rule, init_shared
from fedpriv.mf.lfl import LflServer, finish_release, lfl_codec, lfl_dropout, lfl_plan, needs_round2
from fedpriv.mf.result import MfResult, RoundRecord
from fedpriv.workloads.base import ProtocolGen
from fedpriv.workloads.messages import Kind
from fedpriv.workloads.mf.client import schedule, shared_rows
from fedpriv.workloads.mf.contract import (
    ARRAYS,
    COUNT,
    DESCRIBE,
    ITERATION,
    METRICS,
    N1,
    NUM_DEVICES,
    PARTY_INFO,
    ROUND,
    SHARED,
    SSE,
    WEIGHT,
    WHICH,
    request,
)
from fedpriv.workloads.mf.data import MfSetup
from fedpriv.workloads.protocol import Batch, Broadcast, Commit, Outcome, ProtocolError, Step
from fedpriv.workloads.secure_aggregation import SecAggSettings, secure_sum_steps

__all__ = ["round_record", "serve_central", "serve_devices", "serve_parties"]

_ACCOUNT = ("q", "z", "steps")


def round_record(rec: RoundRecord) -> dict[str, Any]:
    """The metrics line of a finished round: round, test MSE/RMSE, ε so far, seconds, and LFL's n1, n2, halted."""
    mse = float(rec.test_mse)
    extra: dict[str, Any] = {k: rec.extra[k] for k in ("n1", "n2", "halted") if k in rec.extra}
    return {"round": int(rec.round), "test-mse": mse, "test-rmse": math.sqrt(mse) if mse >= 0 else float("nan"),
            "epsilon-total": rec.epsilon, "seconds": float(rec.seconds), **extra}


def _all(batch: Batch, clients: np.ndarray, what: str, role: str = "party") -> Batch:
    """``batch`` when every one of ``clients`` answered well, else ProtocolError naming the first that did not."""
    if batch.left_out:
        client, reason = next(iter(sorted(batch.left_out.items())))
        raise ProtocolError(f"{role} {client} did not answer the {what} step ({reason}); every {role} is required "
                            f"(docs/federated_mf.md §10.1): the run stops, its finished rounds are kept")
    if not np.array_equal(batch.clients, clients):
        raise ProtocolError(f"the {what} step answered clients {batch.clients.tolist()}, expected {clients.tolist()}")
    return batch


def _scalars(batch: Batch, key: str, what: str, kind: type) -> np.ndarray:
    """The finite scalar ``metrics[key]`` of every reply (ProtocolError naming the first party without one)."""
    values = batch.records.get(METRICS, {}).get(key)
    if values is None or values.ndim != 1 or not np.all(np.isfinite(values.astype(np.float64, copy=False))):
        raise ProtocolError(f"every {what} reply must hold a finite {METRICS!r}/{key!r}, got {values!r}")
    if kind is int and not np.issubdtype(values.dtype, np.integer):
        raise ProtocolError(f"every {what} reply's {key!r} must be an int, got {values.dtype}")
    return values


def _accounts(batch: Batch, what: str) -> list[PartyAccount | None]:
    """Each party's public (q, z, steps) triple from its reply (None when it holds none: a non-private party)."""
    metrics = batch.records.get(METRICS, {})
    present = [k for k in _ACCOUNT if k in metrics]
    if not present:
        return [None] * len(batch)
    if len(present) != len(_ACCOUNT):
        raise ProtocolError(f"the {what} replies must hold all of {_ACCOUNT} or none, got {present}")
    q, z, steps = (metrics[k] for k in _ACCOUNT)
    if not (np.issubdtype(steps.dtype, np.integer) and np.all(steps >= 0) and np.all(q > 0) and np.all(z > 0)):
        raise ProtocolError(f"the {what} replies must hold q > 0, z > 0 and an int steps >= 0, got {q}, {z}, {steps}")
    return [PartyAccount(q=float(a), z=float(b), steps=int(c)) for a, b, c in zip(q, z, steps, strict=True)]


def _errors(batch: Batch, what: str) -> list[tuple[float, int]]:
    """(Σ squared errors, count) per client in the batch's order."""
    sse, count = _scalars(batch, SSE, what, float), _scalars(batch, COUNT, what, int)
    if np.any(count < 0):
        raise ProtocolError(f"every {what} reply's {COUNT!r} must be >= 0, got {count.tolist()}")
    return [(float(s), int(c)) for s, c in zip(sse, count, strict=True)]


def serve_parties(setup: MfSetup) -> ProtocolGen:
    """The three-stage FMF server over the VFL/HFL parties (module docstring)."""
    cfg, digest = setup.cfg, setup.digest
    evaluating = setup.config["mf-evaluate"] == "on"
    run = schedule(cfg)
    parties = setup.roster
    rows = shared_rows(setup)
    start = time.perf_counter()
    server = FmfServer(run, init_shared(run, rows, float(setup.split.train.r_max), setup.seed),
                       rule=composition_rule(run), delta=run.delta)

    def ask(op: str, what: str, kind: Kind = "train", **fields: Any) -> Generator[Step, Any, Batch]:
        batch = yield Broadcast(clients=parties, kind=kind, message=request(op, digest, server.shared, **fields))
        return _all(batch, parties, what)

    def evaluate(which: str, what: str) -> Generator[Step, Any, list[tuple[float, int]] | None]:
        if not evaluating:  # mf-evaluate = "off": the parties release no errors (docs/federated_mf.md §10.2)
            return None
        batch = yield from ask("evaluate", f"{which} evaluation {what}", "evaluate", **{WHICH: which})
        return _errors(batch, f"{which} evaluation {what}")

    batch = yield from ask("setup", "setup (Stage 1)")
    weights = [float(w) for w in _scalars(batch, WEIGHT, "setup", float)]
    for t in range(1, run.total_rounds + 1):  # Stage 2
        t0 = time.perf_counter()
        batch = yield from ask("train", f"round {t} (Stage 2)", "train", **{ROUND: t})
        copies = batch.records.get(ARRAYS, {}).get(SHARED)
        shape = (len(parties), *server.shared.shape)
        if copies is None or copies.shape != shape or not np.issubdtype(copies.dtype, np.floating):
            raise ProtocolError(f"the parties' round-{t} copies are rejected (never averaged): expected float arrays "
                                f"{SHARED!r} of shape {server.shared.shape}, got "
                                f"{None if copies is None else (copies.dtype, copies.shape[1:])}")
        bad = np.flatnonzero(~np.isfinite(copies).reshape(len(parties), -1).all(axis=1))
        if bad.size:
            raise ProtocolError(f"party {int(parties[bad[0]])}'s round-{t} copy is rejected (never averaged): it "
                                "holds NaN/inf values")
        accounts = _accounts(batch, f"round-{t}")
        server.update(list(copies), weights)
        errors = yield from evaluate("test", f"after round {t}")
        rec = server.record(t, accounts, errors, time.perf_counter() - t0)
        yield Commit(round_record(rec))
    before = yield from evaluate("test", "before fine-tuning")
    batch = yield from ask("finetune", "fine-tuning (Stage 3)")
    accounts = _accounts(batch, "fine-tuning")
    try:
        described = [json.loads(str(d)) for d in batch.records[PARTY_INFO][DESCRIBE]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"the fine-tuning replies must hold a readable {PARTY_INFO!r}/{DESCRIBE!r}: {exc}") from None
    after = yield from evaluate("test", "after fine-tuning")
    train = yield from evaluate("train", "after fine-tuning")
    result = server.result(test_after=after, test_before=before, train=train, accounts=accounts,
                           seconds=time.perf_counter() - start, info={"parties": described})
    if cfg.setting == "hfl":
        from fedpriv.mf.hfl import hfl_info

        result = _with_info(result, hfl_info(cfg))
    return Outcome(info={"result": result})


def _with_info(result: MfResult, info: dict[str, Any]) -> MfResult:
    import dataclasses

    return dataclasses.replace(result, info={**result.info, **info})


def serve_devices(setup: MfSetup) -> ProtocolGen:
    """LFL-SGDMF's server over one device per user, with two secure-aggregation rounds per iteration (docstring)."""
    cfg, digest, seed = setup.cfg, setup.digest, setup.seed
    evaluating = setup.config["mf-evaluate"] == "on"
    train = setup.split.train
    roster = setup.roster
    plan = lfl_plan(cfg, num_devices=int(roster.size), n_items=int(train.n_items), R=float(train.r_max))
    spec = SecAggSettings(mode=cfg.aggregator, omega=cfg.omega, codec=lfl_codec(plan) if cfg.aggregator == "protocol"
                      else None, dropout=lfl_dropout(cfg, seed), seed=seed, graph=cfg.graph_policy)
    start = time.perf_counter()
    server = LflServer(cfg, plan, seed)
    lost: dict[int, str] = {}

    def ask(op: str, kind: Kind = "train", **fields: Any) -> Generator[Step, Any, Batch]:
        alive = np.asarray([c for c in roster.tolist() if c not in lost], dtype=np.int64)
        if not alive.size:
            raise ProtocolError(f"no device is left to ask for {op!r}: every device failed ({_lost(lost)})")
        batch = yield Broadcast(clients=alive, kind=kind, message=request(op, digest, server.V, **fields))
        lost.update(batch.left_out)
        if not len(batch):
            raise ProtocolError(f"no device answered {op!r} ({_lost(batch.left_out)})")
        return batch

    def evaluate(which: str) -> Generator[Step, Any, list[tuple[float, int]] | None]:
        if not evaluating:  # mf-evaluate = "off": the devices release no errors (docs/federated_mf.md §10.2)
            return None
        batch = yield from ask("evaluate", "evaluate", **{WHICH: which})
        return _errors(batch, f"{which} evaluation")

    yield from ask("pretrain")  # Stage 1
    if cfg.algorithm != "stage1-only":
        for t in range(cfg.total_rounds):  # Stage 2
            t0 = time.perf_counter()
            round1 = yield from secure_sum_steps(spec, roster, request("report", digest, server.V, **{
                ITERATION: t, ROUND: 1, NUM_DEVICES: plan.num_devices}), instance=2 * t, dim=plan.dim, skip=lost)
            lost.update(_failed(round1))
            round2 = None
            if needs_round2(plan, round1):
                round2 = yield from secure_sum_steps(spec, round1.survivors, request("report", digest, None, **{
                    ITERATION: t, ROUND: 2, N1: len(round1.survivors)}), instance=2 * t + 1, dim=plan.dim, skip=lost)
                lost.update(_failed(round2))
            extra = server.step(t, finish_release(plan, round1, round2, cfg.lfl_mode))
            rec = server.record(t, extra, (yield from evaluate("test")), time.perf_counter() - t0)
            yield Commit(round_record(rec))
    before = yield from evaluate("test")
    yield from ask("finetune")  # Stage 3
    after = yield from evaluate("test")
    train_err = yield from evaluate("train")
    info = {"lost_devices": dict(sorted(lost.items()))} if lost else None
    result = server.result(test_before=before, test_after=after, train=train_err,
                           seconds=time.perf_counter() - start, info=info)
    return Outcome(info={"result": result})


def _failed(result: Any) -> dict[int, str]:
    """The devices that answered an instance with an error (failed, refused or lost): left out from then on."""
    return {int(c): r for c, r in result.rejected.items() if "error reply" in r}


def _lost(reasons: dict[int, str]) -> str:
    return "; ".join(f"device {c}: {r}" for c, r in list(sorted(reasons.items()))[:3]) or "no reply"


def serve_central(setup: MfSetup, split: Any) -> ProtocolGen:
    """A §8.5 central baseline on the full data (one trusted party, in process): its rounds committed after the run."""
    from fedpriv.mf.central import run_central

    updates: list[dict[str, Any]] = []
    last = [time.perf_counter()]

    def progress(update: dict[str, Any]) -> None:
        now = time.perf_counter()
        updates.append({**update, "seconds": now - last[0]})
        last[0] = now

    result = run_central(split, setup.cfg, setup.seed, progress)
    for update in updates:
        yield Commit(round_record(RoundRecord(round=int(update["round"]), test_mse=float(update["test_mse"]),
                                              epsilon=update.get("epsilon"), seconds=update["seconds"])))
    return Outcome(info={"result": result})

