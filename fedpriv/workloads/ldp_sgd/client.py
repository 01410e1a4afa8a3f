"""The client side of federated LDP-SGD: local training, the release's privatization, and the batched engine.

* :func:`train_handler` — a train request → :func:`fedpriv.federated.local.local_update` on the
  client's own partition → the *release* of the last local step (``base``, ``vector``, ``scale``),
  still clean. It is what the ClientApp's train function returns in Flower.
* :func:`privatize` — the release → ``base + scale · perturb(vector)`` with the client's keyed
  release stream (:func:`fedpriv.federated.local.finish_update`), plus the perturbation's metrics
  (:func:`perturbation_metrics`). In Flower, ``clients.mods.LdpMod`` does this as a mod; in process
  this function does it as middleware: the same arithmetic in every runtime. Each round is released
  at most once per client (a replayed round would reuse its noise).
* :func:`batch_handler` — the batched engine: the clients of a broadcast trained in chunks as one
  ``torch.func.vmap`` computation and privatized as one ``(clients × d)`` block
  (:mod:`fedpriv.federated.batched`). It agrees with the per-client path within float32 rounding
  (vmap's kernels sum in another order), the one workload specialization that is not bit for bit.

Attacks (docs/attacks.md): an attacker's labels are flipped before training (``label-flip``, in
:func:`train_handler` and row-wise in the batched engine), a share of its examples carries a pixel
trigger and the target label (``backdoor``, :func:`fedpriv.attacks.backdoor.backdoor_data`: in
:func:`train_handler` on its own partition, once for every attacker in :func:`batch_handler`) and
its privatized upload poisoned in :func:`release_upload` and :func:`batch_handler` (``sign-flip``, ``scaling``, ``gaussian``,
:func:`fedpriv.attacks.poisoning.poison_uploads`, one function for both) or replaced by the ends of the
mechanism's output range (``ldp-manipulation``, :func:`fedpriv.attacks.sgd_manipulation.manipulate_uploads`,
likewise).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedpriv.attacks.backdoor import backdoor_data
from fedpriv.attacks.poisoning import flip_labels, label_flip_rows, poison_uploads
from fedpriv.attacks.selection import attackers_of
from fedpriv.attacks.sgd_manipulation import manipulate_uploads
from fedpriv.data.client_source import ClientSource, PooledClients
from fedpriv.federated.allocator import keep_large_blocks
from fedpriv.federated.batched import batched_finish, batched_local_update, client_bytes
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import (
    LocalResult,
    Release,
    build_perturbation,
    check_data,
    effective_batch_size,
    empty_client_error,
    finish_update,
    local_update,
    release_rng,
)
from fedpriv.node.randomness import Randomness
from fedpriv.perturbation import Perturbation
from fedpriv.workloads.base import Node
from fedpriv.workloads.ldp_sgd.contract import (
    ARRAYS,
    BASE,
    CLIENT_ID,
    CONFIG,
    METRICS,
    NUM_EXAMPLES,
    ORACLE_CLEAN,
    PARAMS,
    SCALE,
    SERVER_ROUND,
    VECTOR,
    metric_key,
)
from fedpriv.workloads.messages import Arrays, Message, Metrics, Refusal, Request
from fedpriv.workloads.protocol import Batch, Broadcast

__all__ = ["DEFAULT_MEMORY_MB", "MAX_CHUNK", "ChunkFeed", "ClientData", "chunk_feed", "RELEASED", "batch_handler", "chunk_size",
           "perturbation_metrics", "privatize", "release_upload", "round_and_params", "train_handler"]

#: Node state key: the rounds this client has released (each at most once).
RELEASED = "released-rounds"
#: Most clients per chunk of the batched engine (LR-785 on 2 cores: 1,000 clients in one chunk ran 0.37–0.41 s a
#: round, in chunks of 128 0.47–0.50 s: a chunk's per-step calls cost more than its blocks leaving the caches).
MAX_CHUNK = 1024
#: Default memory budget of one chunk, in MiB.
DEFAULT_MEMORY_MB = 2048


@dataclass(frozen=True)
class ClientData:
    """One client's training data and the model architecture of the run (shared, never trained in place)."""

    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    model: nn.Module


def round_and_params(request: Request) -> tuple[int, np.ndarray]:
    """The round and the flat global model of a train request (or Refusal)."""
    if request.kind != "train":
        raise Refusal(f"expected a train request, got a {request.kind!r} request")
    arrays, config = request.message.get(ARRAYS), request.message.get(CONFIG)
    if arrays is None or set(arrays) != {PARAMS}:
        raise Refusal(f"the train request must carry record {ARRAYS!r} with the single array {PARAMS!r}")
    server_round = None if config is None else config.get(SERVER_ROUND)
    if isinstance(server_round, bool) or not isinstance(server_round, (int, np.integer)) or server_round < 1:
        raise Refusal(f"expected an int {SERVER_ROUND!r} >= 1 in record {CONFIG!r}, got {server_round!r}")
    return int(server_round), np.asarray(arrays[PARAMS])


def train_handler(config: LdpSgdConfig) -> Callable[[Request, Node], Message]:
    """The handler: E clipped local SGD steps from the global model; reply the (clean) release."""

    def handle(request: Request, node: Node) -> Message:
        server_round, params = round_and_params(request)
        data: ClientData = node.data
        y = flip_labels(data.y, data.num_classes) if label_flip_rows(config, [node.client])[0] else data.y
        x, y = backdoor_data(config, data.x, y, [node.client], [np.arange(data.x.shape[0])])
        result = local_update(data.model, torch.from_numpy(params), x, y, config, server_round=server_round,
                              client_id=node.client, num_classes=data.num_classes, randomness=node.randomness)
        release = result.release
        metrics: dict[str, Any] = {metric_key(k): float(v) for k, v in result.metrics.items()}
        metrics.update({SCALE: float(release.scale), NUM_EXAMPLES: int(result.num_examples),
                        CLIENT_ID: int(node.client)})
        return Message({ARRAYS: Arrays({BASE: release.base.detach().cpu().numpy(),
                                        VECTOR: release.vector.detach().cpu().numpy()}),
                        METRICS: Metrics(metrics)})

    return handle


def perturbation_metrics(metrics: Mapping[str, float], config: LdpSgdConfig, *, d: int,
                         batch_size: int) -> dict[str, float]:
    """The MetricRecord entries of one privatization: ``ldp-<metric>``, the guarantee and ``privacy-claim``.

    ``guarantee-epsilon``/``guarantee-delta`` are those of the perturbation for a d-dimensional
    release (ε = inf without noise); ``privacy-claim`` is 1.0 when the guarantee holds for this
    call and 0.0 when the configuration or this call's data voided it.
    """
    guarantee = build_perturbation(config, batch_size=batch_size).guarantee_for(d)
    holds = bool(guarantee.holds) and metrics.get("privacy_claim", 1.0) != 0.0
    out = {f"ldp-{metric_key(k)}": float(v) for k, v in metrics.items() if k != "privacy_claim"}
    out["guarantee-epsilon"] = float(guarantee.epsilon)
    out["guarantee-delta"] = float(guarantee.delta)
    out["privacy-claim"] = 1.0 if holds else 0.0
    return out


def release_upload(config: LdpSgdConfig, base: np.ndarray, vector: np.ndarray, metrics: Mapping[str, Any], *,
                   global_params: np.ndarray, server_round: int, client_id: int,
                   randomness: Randomness) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The upload of a release (``base + scale · perturb(vector)``, float32) and its reply metrics.

    The one place the release of a train reply is privatized, for ``ldp_mod`` and its in-process twin:
    :func:`fedpriv.federated.local.finish_update` with the client's release stream from ``randomness`` (keyed
    in a simulation, the node's secret when deployed), then an
    attacker's model poisoning against ``global_params``, the model the request carried
    (:func:`fedpriv.attacks.poisoning.poison_uploads`); the
    metrics lose ``scale`` and gain the perturbation's (:func:`perturbation_metrics`), whose
    ``privacy-claim`` also holds only if the client's noisy inner steps kept theirs. With
    ``analyzer-oracle = "on"`` (simulation only) the clean update rides along.
    """
    out_metrics = {k: v for k, v in metrics.items() if k != SCALE}
    n = int(metrics[NUM_EXAMPLES])
    b = effective_batch_size(config, n)
    release = Release(base=torch.from_numpy(base), vector=torch.from_numpy(vector), scale=float(metrics[SCALE]))
    perturbation = build_perturbation(config, batch_size=b)
    flat, pmetrics = finish_update(LocalResult(release=release, num_examples=n), perturbation,
                                   release_rng(config, server_round=server_round, client_id=client_id,
                                               randomness=randomness))
    flat = poison_uploads(config, flat.unsqueeze(0), torch.from_numpy(np.asarray(global_params)), [client_id],
                          server_round=server_round)
    flat = manipulate_uploads(config, flat, release.base.unsqueeze(0), release.vector.unsqueeze(0), release.scale,
                              perturbation, [client_id])[0]
    inner = float(metrics.get("privacy-claim", 1.0))
    out_metrics.update(perturbation_metrics(pmetrics, config, d=int(base.size), batch_size=b))
    out_metrics["privacy-claim"] = min(inner, out_metrics["privacy-claim"])
    arrays = {PARAMS: flat.detach().cpu().numpy().astype(np.float32, copy=False)}
    if config["analyzer-oracle"] == "on":
        arrays[ORACLE_CLEAN] = (release.base + release.scale * release.vector).detach().cpu().numpy().astype(
            np.float32, copy=False)
    return arrays, out_metrics


def privatize(config: LdpSgdConfig) -> Callable[[Request, Node, Callable[[Request, Node], Message]], Message]:
    """The release privatization as in-process middleware (``ldp_mod``'s arithmetic and its once-per-round rule)."""

    def middleware(request: Request, node: Node, call_next: Callable[[Request, Node], Message]) -> Message:
        server_round, params = round_and_params(request)
        released = [int(r) for r in node.state.get(RELEASED, [])]
        if server_round in released:
            raise Refusal(f"round {server_round} was already released by this client: the server must send each "
                          "round once (a repeated round would reuse the same noise)")
        reply = call_next(request, node)
        arrays, metrics = release_upload(config, reply[ARRAYS][BASE], reply[ARRAYS][VECTOR], reply[METRICS],
                                         global_params=params, server_round=server_round, client_id=node.client,
                                         randomness=node.randomness)
        node.state[RELEASED] = [*released, server_round]
        return Message({ARRAYS: Arrays(arrays), METRICS: Metrics(metrics)})

    return middleware


def chunk_size(config: LdpSgdConfig, model: nn.Module, input_shape: tuple[int, ...], memory_mb: int) -> int:
    """Clients per chunk of the batched engine: as many as fit ``memory_mb`` MiB (estimated), at most :data:`MAX_CHUNK`.

    The memory budget, not :data:`MAX_CHUNK`, bounds the chunk of a large model (``benchmarks/memory_bench.py``).
    """
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 1:
        raise ValueError(f"memory_mb must be an integer >= 1 (MiB), got {memory_mb!r}")
    return max(1, min(MAX_CHUNK, memory_mb * 2**20 // client_bytes(model, config, input_shape)))


#: What the batched engine trains a chunk on: ``(x, y, parts)``, ``parts[j]`` indexing ``x`` at the j-th client's examples.
ChunkFeed = Callable[[np.ndarray], tuple[torch.Tensor, torch.Tensor, list[np.ndarray]]]


def chunk_feed(config: LdpSgdConfig, source: ClientSource, model: nn.Module) -> ChunkFeed:
    """The training data of a chunk of clients, asked of ``source`` one chunk at a time.

    A :class:`~fedpriv.data.PooledClients` set is one array for every client: it is checked and its
    backdoor attackers' examples poisoned once, and every chunk indexes it. Otherwise each chunk is
    built (generated) when it is trained, checked, its attackers' examples poisoned
    (:func:`fedpriv.attacks.backdoor.backdoor_data`, keyed per client: the same rows as alone), and dropped
    after: the engine holds one chunk's data at a time.
    """
    if isinstance(source, PooledClients):
        x, y = check_data(model, torch.from_numpy(np.array(source.train.x)), torch.from_numpy(np.array(source.train.y)),
                          source.num_classes)  # once, not per client
        attacking = attackers_of(config)
        x, y = backdoor_data(config, x, y, attacking, [source.parts[c] for c in attacking])
        return lambda ids: (x, y, [source.parts[int(c)] for c in ids])

    def feed(ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, list[np.ndarray]]:
        chunk = source.chunk(ids)
        x_chunk, y_chunk = check_data(model, torch.from_numpy(chunk.x), torch.from_numpy(chunk.y), source.num_classes)
        x_chunk, y_chunk = backdoor_data(config, x_chunk, y_chunk, ids, chunk.parts)  # only the attackers among ids
        return x_chunk, y_chunk, chunk.parts

    return feed


def batch_handler(config: LdpSgdConfig, source: ClientSource, model: nn.Module, *,
                  memory_mb: int = DEFAULT_MEMORY_MB, threads: int | None = None) -> Callable[[Broadcast], Batch]:
    """The batched engine's broadcast handler (module docstring): chunks of at most ``memory_mb`` MiB, each chunk's
    data asked of ``source`` when it is trained (:func:`chunk_feed`), ``threads`` torch threads (default: every
    core — one big computation)."""
    chunk = chunk_size(config, model, source.input_shape, memory_mb)
    torch.set_num_threads(threads or os.cpu_count() or 1)
    keep_large_blocks()  # the steps' blocks are reused, not page-faulted in again (fedpriv/federated/allocator.py)
    feed = chunk_feed(config, source, model)
    num_classes = source.num_classes
    cache: dict[int, Perturbation] = {}

    def perturbation_of_batch(b: int) -> Perturbation:
        if b not in cache:
            cache[b] = build_perturbation(config, batch_size=b)
        return cache[b]

    def answer(step: Broadcast) -> Batch:
        server_round, params = round_and_params(Request(client=int(step.clients[0]), kind=step.kind,
                                                         message=step.message))
        global_params = torch.from_numpy(params)
        ids_all = np.asarray(step.clients, dtype=np.int64)
        errors: dict[int, str] = {}
        rows: dict[str, list[np.ndarray]] = {"ids": [], "n": [], "loss": [], "claim": []}
        oracle = config["analyzer-oracle"] == "on"
        d = int(params.size)  # the (clients × d) blocks, filled chunk by chunk: never a second copy of them
        blocks = {key: np.empty((ids_all.size, d), dtype=np.float32) for key in (PARAMS, ORACLE_CLEAN)[:1 + oracle]}
        filled = 0
        for start in range(0, ids_all.size, chunk):
            ids = ids_all[start:start + chunk]
            empty = source.sizes(ids) == 0
            for cid in ids[empty]:  # local_update's error for a client without data
                error = empty_client_error(int(cid))
                errors[int(cid)] = f"{type(error).__name__}: {error}"
            ids = ids[~empty]
            if ids.size == 0:
                continue
            x, y, parts = feed(ids)
            result = batched_local_update(model, global_params, x, y, parts, config,
                                          server_round=server_round, client_ids=ids, num_classes=num_classes,
                                          flip_labels=label_flip_rows(config, ids))
            uploads, claims = batched_finish(result, perturbation_of_batch, config, server_round=server_round)
            uploads = poison_uploads(config, uploads, global_params, ids, server_round=server_round)
            uploads = manipulate_uploads(config, uploads, result.base.cpu(), result.vector.cpu(), result.scale,
                                         perturbation_of_batch(int(config["batch-size"])), ids)
            for row, failure in result.failed.items():
                errors[int(ids[row])] = f"{type(failure).__name__}: {failure}"
            keep = np.ones(ids.size, dtype=bool)
            keep[list(result.failed)] = False
            sel = torch.from_numpy(np.flatnonzero(keep))
            rows["ids"].append(ids[keep])
            blocks[PARAMS][filled:filled + sel.numel()] = (uploads if keep.all() else uploads[sel]).numpy()
            rows["n"].append(np.asarray(result.num_examples)[keep].astype(np.int64))
            rows["loss"].append(np.asarray(result.metrics["train_loss"], dtype=np.float64)[keep])
            rows["claim"].append(np.where(claims[keep], 1.0, 0.0))
            if oracle:
                blocks[ORACLE_CLEAN][filled:filled + sel.numel()] = (result.base + result.scale * result.vector).cpu()[sel].numpy()
            filled += sel.numel()

        def cat(key: str, dtype: Any = np.float64) -> np.ndarray:
            return np.concatenate(rows[key]) if rows[key] else np.zeros(0, dtype=dtype)

        arrays = {key: block[:filled] for key, block in blocks.items()}
        clients = cat("ids", dtype=np.int64)
        metrics = {CLIENT_ID: clients.copy(), NUM_EXAMPLES: cat("n", dtype=np.int64),
                   "train-loss": cat("loss"), "privacy-claim": cat("claim")}
        return Batch(clients=clients, records={ARRAYS: arrays, METRICS: metrics}, errors=errors)

    return answer
