"""The server side of a secure sum: per iteration two secure-aggregation instances, combined and charged.

Iteration ``it`` runs round 1 over the whole roster (instance ``2·it``), then — unless round 1
halted or ζ₂(n1) does not exist — round 2 over round 1's survivors (instance ``2·it + 1``, the
request carrying ``n1``): the control flow of :func:`fedpriv.secagg.noise.two_round_sum`, as
protocol steps (:func:`fedpriv.workloads.secure_aggregation.secure_sum_steps`). It combines the
rounds (:func:`~fedpriv.secagg.noise.combine_rounds`: ``S = S₁ + a·S₂``, docs/federated_mf.md §6.3–§6.4),
charges the release at its true σ_eff in the :class:`~fedpriv.secagg.ledger.DistributedDpLedger`
(a halted iteration releases nothing and costs nothing), estimates the mean ``S/n1`` and commits the
iteration: its metrics line, the last released estimate and the ledger. Every iteration depends
only on the run and its index (keyed streams), so resuming after the last commit releases what an
uninterrupted run releases.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.rundir import Committed, RunDirectoryError
from fedpriv.secagg.ledger import DistributedDpLedger
from fedpriv.secagg.noise import NoisySum, combine_rounds
from fedpriv.secagg.task import ledger_for
from fedpriv.workloads.protocol import Commit, Outcome, Step
from fedpriv.workloads.secure_aggregation import secure_sum_steps
from fedpriv.workloads.secure_sum.contract import instance, report_request

__all__ = ["SecureSumServer", "iteration_record", "serve"]


@dataclass(frozen=True)
class SecureSumServer:
    """What the server holds in simulation: every client's clipped vector (the truth the estimate is scored against)."""

    signals: np.ndarray


def iteration_record(iteration: int, noisy: NoisySum, estimate: np.ndarray | None, truth: np.ndarray | None,
                     totals: dict[str, Any]) -> dict[str, Any]:
    """The metrics line of ``iteration`` (``totals``: the ledger's totals after it).

    ``rejected-reasons`` lists why each rejected client's message was left out (``"round r client c: step
    's': reason"``: an error reply gives the client's own reason, e.g. a refusal of its ``SecAggMod``).
    """
    round2 = noisy.round2
    rmse = predicted = None
    rounds = [(1, noisy.round1)] + ([] if round2 is None else [(2, round2)])
    if estimate is not None and truth is not None and noisy.estimate_std is not None:
        rmse = float(np.sqrt(np.mean((estimate - truth) ** 2)))
        predicted = noisy.estimate_std / noisy.n1  # per-coordinate std of S/n1 (docs/federated_mf.md §6.4): the RMSE's expectation
    return {
        "round": iteration + 1,
        "halted": noisy.halted,
        "halted-at": noisy.round1.halted_at,
        "round2-halted-at": None if round2 is None else round2.halted_at,
        "n1": noisy.n1,
        "n2": noisy.n2,
        "rejected": sum(len(result.rejected) for _, result in rounds),
        "rejected-reasons": [f"round {r} client {c}: {result.rejected[c]}" for r, result in rounds
                             for c in sorted(result.rejected)],
        "sigma-target": noisy.sigma_target,
        "sigma-eff": noisy.sigma_eff,
        "estimate-std": noisy.estimate_std,
        "rmse": rmse,
        "predicted-rmse": predicted,
        "epsilon-total": totals["epsilon"],
        "epsilon-claimed": totals.get("epsilon_at_target_sigma"),
    }


def _restore(setup: Any, committed: Committed) -> tuple[np.ndarray, DistributedDpLedger]:
    """The last released estimate and the ledger: fresh, or from the run's last commit."""
    if not committed.round:
        return np.zeros(0), ledger_for(setup.spec)
    if committed.ledger is None or "params" not in committed.arrays:
        raise RunDirectoryError("the last commit of this secure-sum run holds no ledger or estimate: start a new run")
    return committed.arrays["params"], DistributedDpLedger.from_state_dict(committed.ledger)


def serve(setup: Any, server: SecureSumServer, committed: Committed) -> Generator[Step, Any, Outcome]:
    """Iterations ``committed.round .. iterations − 1`` (module docstring)."""
    spec, noise, settings = setup.spec, setup.noise, setup.settings
    params, ledger = _restore(setup, committed)
    for it in range(committed.round, spec.iterations):
        began = time.perf_counter()
        round1 = yield from secure_sum_steps(settings, spec.client_ids, report_request(spec, it, 1),
                                             instance=instance(it, 1), dim=spec.dim)
        round2 = None
        n1 = len(round1.survivors)
        if not round1.halted and noise.zeta2(n1) is not None:
            round2 = yield from secure_sum_steps(settings, round1.survivors, report_request(spec, it, 2, n1),
                                                 instance=instance(it, 2), dim=spec.dim)
        noisy = combine_rounds(noise, round1, round2)
        ledger.record(it, noisy)
        estimate = truth = None
        if noisy.total is not None:
            estimate = np.asarray(noisy.total, dtype=np.float64) / noisy.n1
            truth = server.signals[np.asarray(noisy.round1.survivors, dtype=np.int64)].mean(axis=0)
            params = estimate
        record = {**iteration_record(it, noisy, estimate, truth, ledger.totals()),
                  "seconds": time.perf_counter() - began}
        yield Commit(record, arrays={"params": params}, ledger=ledger.state_dict())
    return Outcome(arrays={"params": params})
