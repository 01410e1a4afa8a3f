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

__all__ = ["FastEngine", "RoundFailed"]


class RoundFailed(RuntimeError):
    """Too few valid client replies for the strategy: the round cannot be aggregated."""


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

    def perturbation_for(self, num_examples: int):
        """The release perturbation of a client with ``num_examples`` (GeoDP's B is min(B, n_k))."""
        b = effective_batch_size(self.config, num_examples)
        if b not in self._perturbations:
            self._perturbations[b] = build_perturbation(self.config, batch_size=b)
        return self._perturbations[b]

    def run_round(self, server_round: int, params: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """One round: sample, train and privatize each client, validate, aggregate, evaluate."""
        cfg = self.config
        start = time.perf_counter()
        chosen = sample_clients(cfg.seed, server_round, cfg.num_clients, cfg.fraction_train, cfg.min_clients)
        global_params = torch.from_numpy(params)
        updates, weights, ids, losses, examples, cleans = [], [], [], [], {}, []
        rejected: dict[str, int] = {}
        failed_reasons: dict[str, int] = {}
        failed = 0
        for cid in chosen.tolist():
            idx = self.parts[cid]
            try:
                result = local_update(self.model, global_params, self.x[idx], self.y[idx], cfg,
                                      server_round=server_round, client_id=cid, num_classes=self.train.num_classes)
                pert = self.perturbation_for(result.num_examples)
                new, _ = finish_update(result, pert, release_rng(cfg, server_round=server_round, client_id=cid))
            except Exception as exc:  # a failing client is reported (with its reason), the round goes on
                failed += 1
                failed_reasons[f"client {cid}: {type(exc).__name__}: {exc}"[:200]] = 1
                continue
            vec = new.detach().numpy().astype(np.float32)
            reason = validate_update(vec, params.size)
            if reason is not None:
                rejected[reason] = rejected.get(reason, 0) + 1
                continue
            updates.append(vec)
            if self.analysis is not None and self.analysis.oracle:  # simulation oracle: the clean counterpart
                release = result.release
                cleans.append((release.base + release.scale * release.vector).detach().numpy())
            weights.append(1.0 if cfg.weights == "uniform" else float(result.num_examples))
            ids.append(cid)
            losses.append((result.metrics["train_loss"], result.num_examples))
            examples[cid] = result.num_examples
        if len(updates) < cfg.min_clients:
            raise RoundFailed(f"round {server_round}: {len(updates)} valid client update(s), fewer than "
                              f"min-clients={cfg.min_clients} ({failed} failed, {sum(rejected.values())} rejected)")
        new_params = aggregate(np.stack(updates), np.asarray(weights), cfg.strategy,
                               trim_beta=cfg.trim_beta, num_malicious=cfg.num_malicious).astype(np.float32)
        analysis: dict[str, float] = {}
        if self.analysis is not None:
            inputs = RoundInputs(server_round=server_round, global_params=params, updates=np.stack(updates),
                                 weights=np.asarray(weights), aggregated=new_params,
                                 clean=np.stack(cleans) if self.analysis.oracle else None)
            recalibrated, analysis = self.analysis(inputs)
            new_params = recalibrated.astype(np.float32)
        n_tot = sum(n for _, n in losses)
        record = {
            "round": server_round,
            "clients": len(ids),
            "client-ids": ids,
            "num-examples": examples,
            "failed": failed,
            "rejected": sum(rejected.values()),
            "rejected-reasons": rejected,
            "failed-reasons": list(failed_reasons),
            "train-loss": sum(l * n for l, n in losses) / n_tot,
            **analysis,
            **{f"test-{k}": v for k, v in self.evaluate(new_params).items()},
            "seconds": time.perf_counter() - start,
        }
        return new_params, record
