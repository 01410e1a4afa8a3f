"""The fast engine: every client of a round called in-process, one after another, no messages.

It runs the same client code (``local_update`` then ``finish_update``, the function Flower's
``ldp_mod`` calls), the same client sampling and the same aggregation as the Flower strategy, so
both engines give the same global model for the same config and seed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from fedpriv.config import RunConfig
from fedpriv.data import load_dataset, partition_for
from fedpriv.federated.aggregate import aggregate, validate_update
from fedpriv.federated.local import (
    build_perturbation,
    effective_batch_size,
    finish_update,
    local_update,
    release_rng,
)
from fedpriv.federated.sampling import sample_clients
from fedpriv.federated.server_analysis import (
    RoundInputs,
    ServerAnalysis,
    proxy_gradients,
)
from fedpriv.models import build_model, evaluate, get_flat
from fedpriv.perturbation import Perturbation

__all__ = ["FastEngine", "Replies", "RoundFailed"]


class RoundFailed(RuntimeError):
    """Too few valid client replies for the strategy: the round cannot be aggregated."""


class Replies:
    """The clients' replies of one round: uploads, ids, example counts, losses, failures and rejections.

    Uploads arrive one at a time (:meth:`add`, the sequential engine) or as a block of rows
    (:meth:`add_rows`, the batched engine); :meth:`validate` then drops the unusable ones with their
    reasons (:func:`fedpriv.federated.aggregate.validate_update`).
    """

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.num_examples: list[int] = []
        self.losses: list[float] = []
        self.failed = 0
        self.failed_reasons: dict[str, int] = {}
        self.claims_voided = 0  # releases whose data voided their guarantee (e.g. LDPVec 'keep' leaked a norm)
        self.rejected: dict[str, int] = {}
        self._blocks: list[np.ndarray] = []
        self._clean: list[np.ndarray] = []

    def fail(self, cid: int, error: BaseException) -> None:
        """Record a client that raised ``error`` instead of replying."""
        self.failed += 1
        self.failed_reasons[f"client {cid}: {type(error).__name__}: {error}"[:200]] = 1

    def add(self, cid: int, update: np.ndarray, num_examples: int, loss: float, clean: np.ndarray | None,
            claim: bool = True) -> None:
        """Record one client's upload (and, for the oracle, its clean counterpart; ``claim``: its guarantee held)."""
        self.add_rows([cid], update[None], [num_examples], [loss], None if clean is None else clean[None], [claim])

    def add_rows(self, cids: list[int], updates: np.ndarray, num_examples: Any, losses: Any,
                 clean: np.ndarray | None, claims: Any = None) -> None:
        """Record a block of uploads, one row per client (``claims``: per row, whether its guarantee held)."""
        if claims is not None:
            self.claims_voided += int(np.size(claims) - np.count_nonzero(claims))
        self.ids.extend(int(c) for c in cids)
        self.num_examples.extend(int(n) for n in num_examples)
        self.losses.extend(float(v) for v in losses)
        self._blocks.append(updates)
        if clean is not None:
            self._clean.append(clean)

    def validate(self, expected_d: int) -> None:
        """Drop the uploads :func:`validate_update` rejects, counting each reason."""
        if not self._blocks:
            return
        rows = self.stacked()
        finite = np.isfinite(rows).all(axis=1) if rows.ndim == 2 and rows.shape[1] == expected_d else None
        keep = np.ones(len(self.ids), dtype=bool)
        for i in (range(len(rows)) if finite is None else np.flatnonzero(~finite)):  # only suspicious rows
            reason = validate_update(rows[i], expected_d)
            if reason is not None:
                self.rejected[reason] = self.rejected.get(reason, 0) + 1
                keep[i] = False
        if keep.all():
            return
        self.ids = [c for c, k in zip(self.ids, keep) if k]
        self.num_examples = [n for n, k in zip(self.num_examples, keep) if k]
        self.losses = [v for v, k in zip(self.losses, keep) if k]
        self._blocks = [rows[keep]]
        if self._clean:
            self._clean = [self.stacked_clean()[keep]]

    def stacked(self) -> np.ndarray:
        """All uploads as one (n, d) array."""
        if len(self._blocks) != 1:
            self._blocks = [np.concatenate(self._blocks)] if self._blocks else [np.zeros((0, 0), np.float32)]
        return self._blocks[0]

    def stacked_clean(self) -> np.ndarray:
        """The clean counterparts as one (n, d) array (simulation oracle)."""
        if len(self._clean) != 1:
            self._clean = [np.concatenate(self._clean)]
        return self._clean[0]


class FastEngine:
    """Holds the data, partitions and model of a run and executes its rounds in-process."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        # tiny per-client models: one thread avoids oversubscription on small machines (flower.md §2)
        torch.set_num_threads(1)
        self.train, self.test = load_dataset(config)
        self.parts = partition_for(config, self.train)
        self.model = build_model(config.model, self.train.input_shape, self.train.num_classes, seed=config.seed)
        self.perturbation = build_perturbation(config, batch_size=config.batch_size)
        self._perturbations = {config.batch_size: self.perturbation}
        self.x = torch.from_numpy(np.array(self.train.x))
        self.y = torch.from_numpy(np.array(self.train.y))
        self.x_test = torch.from_numpy(np.array(self.test.x))
        self.y_test = torch.from_numpy(np.array(self.test.y))
        # the server-side analysis; its proxy gradients (federated_ldp_sgd.md §7.3 ii) use the server's held-out data
        self.analysis = ServerAnalysis.from_config(config, self.dim, proxies=proxy_gradients(
            self.model, self.x_test, self.y_test, num_classes=self.train.num_classes, config=config))

    @property
    def dim(self) -> int:
        """Number of model parameters d."""
        return int(get_flat(self.model).numel())

    def initial_params(self) -> np.ndarray:
        """The global model before round 1 (keyed initialization)."""
        return get_flat(self.model).numpy().copy()

    def evaluate(self, params: np.ndarray) -> dict[str, float]:
        """Server-side evaluation on the held-out test set."""
        return evaluate(self.model, self.x_test, self.y_test, num_classes=self.train.num_classes,
                        params=torch.from_numpy(params))

    def perturbation_for(self, num_examples: int) -> Perturbation:
        """The release perturbation of a client with ``num_examples`` (GeoDP's B is min(B, n_k))."""
        return self.perturbation_of_batch(effective_batch_size(self.config, num_examples))

    def perturbation_of_batch(self, b: int) -> Perturbation:
        """The (cached) release perturbation of a client whose minibatches hold b examples."""
        if b not in self._perturbations:
            self._perturbations[b] = build_perturbation(self.config, batch_size=b)
        return self._perturbations[b]

    def run_round(self, server_round: int, params: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """One round: sample, train and privatize each client, validate, aggregate, evaluate."""
        start = time.perf_counter()
        chosen = sample_clients(self.config.seed, server_round, self.config.num_clients, self.config.fraction_train,
                                self.config.min_clients)
        replies = self.client_replies(server_round, chosen.tolist(), params)
        return self.finish_round(server_round, params, replies, start)

    def client_replies(self, server_round: int, chosen: list[int], params: np.ndarray) -> Replies:
        """Train and privatize the chosen clients one after another; validate each upload."""
        cfg = self.config
        global_params = torch.from_numpy(params)
        replies = Replies()
        for cid in chosen:
            idx = self.parts[cid]
            try:
                result = local_update(self.model, global_params, self.x[idx], self.y[idx], cfg,
                                      server_round=server_round, client_id=cid, num_classes=self.train.num_classes)
                pert = self.perturbation_for(result.num_examples)
                new, pmetrics = finish_update(result, pert, release_rng(cfg, server_round=server_round, client_id=cid))
            except Exception as exc:  # a failing client is reported (with its reason), the round goes on
                replies.fail(cid, exc)
                continue
            release = result.release
            clean = (release.base + release.scale * release.vector).detach().numpy() if self.oracle else None
            replies.add(cid, new.detach().numpy().astype(np.float32), result.num_examples,
                        result.metrics["train_loss"], clean, pmetrics["privacy_claim"] != 0.0)
        return replies

    @property
    def oracle(self) -> bool:
        """Whether the server-side analysis needs the clean counterpart of every upload (simulation oracle)."""
        return self.analysis is not None and self.analysis.oracle

    def finish_round(self, server_round: int, params: np.ndarray, replies: Replies,
                     start: float) -> tuple[np.ndarray, dict[str, Any]]:
        """Aggregate the valid replies, run the server-side analysis, evaluate and build the round's record."""
        cfg = self.config
        replies.validate(params.size)
        if len(replies.ids) < cfg.min_clients:
            raise RoundFailed(f"round {server_round}: {len(replies.ids)} valid client update(s), fewer than "
                              f"min-clients={cfg.min_clients} ({replies.failed} failed, "
                              f"{sum(replies.rejected.values())} rejected)")
        updates = replies.stacked()
        weights = (np.ones(len(replies.ids)) if cfg.weights == "uniform"
                   else np.asarray(replies.num_examples, dtype=np.float64))
        aggregated = aggregate(updates, weights, cfg.strategy, trim_beta=cfg.trim_beta, num_malicious=cfg.num_malicious)
        new_params = aggregated.astype(np.float32)
        analysis: dict[str, float] = {}
        if self.analysis is not None:  # the float64 aggregate, as the Flower strategy passes it (LdpFedAvg)
            inputs = RoundInputs(server_round=server_round, global_params=params, updates=updates,
                                 weights=weights, aggregated=aggregated,
                                 clean=replies.stacked_clean() if self.oracle else None)
            recalibrated, analysis = self.analysis(inputs)
            new_params = recalibrated.astype(np.float32)
        n = np.asarray(replies.num_examples, dtype=np.float64)
        record = {
            "round": server_round,
            "clients": len(replies.ids),
            "client-ids": list(replies.ids),
            "num-examples": dict(zip(replies.ids, map(int, replies.num_examples))),
            "failed": replies.failed,
            "rejected": sum(replies.rejected.values()),
            "rejected-reasons": replies.rejected,
            "failed-reasons": list(replies.failed_reasons),
            "train-loss": float(np.dot(np.asarray(replies.losses, dtype=np.float64), n) / n.sum()),
            "privacy-claim": 0.0 if replies.claims_voided else 1.0,  # as Flower's min over the replies
            **analysis,
            **{f"test-{k}": v for k, v in self.evaluate(new_params).items()},
            "seconds": time.perf_counter() - start,
        }
        return new_params, record
