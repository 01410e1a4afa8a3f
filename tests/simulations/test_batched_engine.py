"""The batched engine gives the fast engine's global model, records and failures, whatever its chunk size.

Both engines run the same clients in the same order with the same keyed streams and aggregate the
same way; the batched engine's vmapped local training orders and blocks its reductions differently
(and runs at every core, the fast engine at one thread). So the two agree within their float32
rounding errors, measured by running both engines again with float64 models: the derivation is in
``tests/_rounding.py``; it holds on any CPU and at any thread count (tested at 1 and 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fedpriv.workloads.ldp_sgd.client as ldp_client
import fedpriv.workloads.ldp_sgd.workload as ldp_sgd
from fedpriv.config import RunConfig
from fedpriv.data import Dataset, PooledClients, load_dataset
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.models import build_model
from simulations.runner import resolve_engine, run
from tests._rounding import assert_agree, engine_run

BASE = {"num-clients": 8, "rounds": 2, "local-steps": 2, "batch-size": 16, "partition": "dirichlet",
        "dirichlet-alpha": 0.3, "perturbation": "none", "noise-schedule": "last_step"}  # Dirichlet: unequal clients, some with fewer than B examples
CASES = {
    "none": {"perturbation": "none"},
    "coordinatewise": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0},
    "coordinatewise-duchi-sampled": {"perturbation": "coordinatewise", "mechanism": "duchi", "epsilon": 5.0,
                                     "sample-dims": 50},
    "ldpvec": {"perturbation": "ldpvec", "mechanism": "gaussian", "epsilon": 5.0},
    "geodp": {"perturbation": "geodp", "sigma": 0.5, "noise-schedule": "every_step"},
    "dpsgd": {"perturbation": "dpsgd", "sigma": 0.5, "noise-schedule": "every_step"},
    "mlp-every-step": {"model": "mlp", "perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 5.0,
                       "noise-schedule": "every_step"},
    "cnn-fedmedian": {"model": "cnn", "perturbation": "coordinatewise", "mechanism": "gaussian", "epsilon": 5.0,
                   "strategy": "fedmedian"},
    "centeredclip": {"perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 5.0,
                     "strategy": "centeredclip", "num-malicious": 1, "cc-tau": 0.05, "cc-iters": 2},
    "analyzer-hdr4me": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0,
                        "analyzer": "on", "analyzer-oracle": "on", "recalibration": "hdr4me*", "local-steps": 1},
    # attacks (docs/attacks.md) at attack-fraction 0.2: one attacker of 8, poisoned in the batched engine as one block
    "sign-flip": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0, "attack": "sign-flip",
                  "attack-fraction": 0.2},
    "scaling": {"perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 5.0, "attack": "scaling",
                "attack-fraction": 0.2},
    "gaussian": {"perturbation": "none", "attack": "gaussian", "attack-fraction": 0.2, "attack-std": 0.1},
    "label-flip": {"perturbation": "coordinatewise", "mechanism": "duchi", "epsilon": 5.0, "attack": "label-flip",
                   "attack-fraction": 0.2},
    # the attacker's release at the ends of Duchi's output range, against the signs of its own step (§8)
    "ldp-manipulation": {"perturbation": "coordinatewise", "mechanism": "duchi", "epsilon": 5.0,
                         "attack": "ldp-manipulation", "attack-fraction": 0.2},
    # the batched engine poisons every attacker's examples once; the fast engine each attacker its own partition
    "backdoor": {"perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 5.0, "attack": "backdoor",
                 "attack-fraction": 0.2, "backdoor-target": 3},
}


RECORD_KEYS = ("train-loss", "test-accuracy", "test-loss", "backdoor-asr", "predicted-sq-deviation",
               "realized-sq-deviation", "realized-sq-deviation-recalibrated")


def _assert_engines_agree(cfg: RunConfig, fast: tuple, batched: tuple, **batched_kwargs) -> None:
    """(params, records) of the fast and the batched engine agree within their float32 rounding errors."""
    fast64 = engine_run("fast", cfg, float64=True)
    batched64 = engine_run("batched", cfg, float64=True, **batched_kwargs)
    assert_agree(batched[0], fast[0], a64=batched64[0], b64=fast64[0], what="global model")
    for f, b, f64, b64 in zip(fast[1], batched[1], fast64[1], batched64[1], strict=True):
        assert b["client-ids"] == f["client-ids"] and b["num-examples"] == f["num-examples"]
        for key in RECORD_KEYS:
            if key in f:
                assert_agree(b[key], f[key], a64=b64[key], b64=f64[key], what=f"round {f['round']} {key}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_and_fast_engines_agree(case: str, tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({**BASE, **CASES[case]})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    batched = run(cfg, engine="batched", root=tmp_path / "batched")
    assert batched.summary["engine"] == "batched" and batched.summary["status"] == "finished"
    _assert_engines_agree(cfg, (fast.params, fast.rounds), (batched.params, batched.rounds))


_FAST: dict[str, tuple] = {}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", ["cnn-fedmedian", "mlp-every-step"])
def test_engines_agree_at_one_and_two_threads(case: str, threads: int) -> None:
    # the fast engine always trains at one thread; the batched engine at `threads` (its default: every core)
    cfg = RunConfig.from_mapping({**BASE, **CASES[case]})
    if case not in _FAST:  # the fast engine's run does not depend on `threads`
        _FAST[case] = engine_run("fast", cfg)
    fast = _FAST[case]
    batched = engine_run("batched", cfg, threads=threads)
    _assert_engines_agree(cfg, fast, batched, threads=threads)


def test_chunk_size_does_not_change_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = RunConfig.from_mapping({**BASE, **CASES["coordinatewise"]})
    whole = run(cfg, engine="batched", root=tmp_path / "whole")
    whole64 = engine_run("batched", cfg, float64=True)
    monkeypatch.setattr(ldp_client, "MAX_CHUNK", 3)  # 8 clients in chunks of 3, 3, 2
    assert _chunk(cfg, 2048) == 3
    chunked = run(cfg, engine="batched", root=tmp_path / "chunked")
    chunked64 = engine_run("batched", cfg, float64=True)
    assert_agree(chunked.params, whole.params, a64=chunked64[0], b64=whole64[0], what="global model")


def _chunk(cfg: RunConfig, memory_mb: int) -> int:
    train, _ = load_dataset(cfg)
    model = build_model(cfg["model"], train.input_shape, train.num_classes, seed=cfg["seed"])
    return ldp_client.chunk_size(LdpSgdConfig.of(cfg), model, train.input_shape, memory_mb)


def test_memory_budget_bounds_the_chunk(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({**BASE, "model": "cnn"})
    assert _chunk(cfg, 1) < _chunk(cfg, 2048)
    with pytest.raises(ValueError, match="memory_mb must be an integer >= 1"):
        run(cfg, engine="batched", root=tmp_path, memory_mb=0)


def test_empty_and_diverging_clients_fail_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = RunConfig.from_mapping({"num-clients": 6, "rounds": 2, "local-steps": 2, "min-clients": 3,
                                  "partition": "iid", "perturbation": "none"})
    real_init = ldp_sgd._Clients.__init__

    def init(self, config):
        real_init(self, config)
        pooled = self.source
        x = np.array(pooled.train.x)
        x[pooled.parts[4]] = 3e38  # client 4's loss overflows: its training diverges
        parts = list(pooled.parts)
        parts[2] = parts[2][:0]  # client 2 holds no examples
        self.source = PooledClients(Dataset(x, pooled.train.y, pooled.num_classes, "diverging"), parts)

    monkeypatch.setattr(ldp_sgd._Clients, "__init__", init)
    result = run(cfg, engine="batched", root=tmp_path)
    assert result.summary["status"] == "finished"
    for record in map(json.loads, (result.directory / "metrics.jsonl").read_text().splitlines()):
        assert record["client-ids"] == [0, 1, 3, 5] and record["failed"] == 2
        reasons = record["failed-reasons"]
        assert "client 2: ValueError: client data must be non-empty" in reasons[0]
        assert reasons[1].startswith("client 4: FloatingPointError: local training of client 4 diverged")
    assert np.isfinite(result.params).all()


def test_auto_engine_is_batched_for_ldp_sgd_and_fast_for_the_mean_task() -> None:
    assert resolve_engine(RunConfig(), "auto") == "batched"
    assert resolve_engine(RunConfig.from_mapping({"task": "mean"}), "auto") == "fast"
    assert resolve_engine(RunConfig(), "flower") == "flower"
    with pytest.raises(ValueError, match="engine must be one of"):
        resolve_engine(RunConfig(), "gpu")
