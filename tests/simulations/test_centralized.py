"""Centralized DP-SGD / GeoDP (docs/geodp.md, "Centralized training"): one client with the whole training set.

R rounds of E noised local steps of that client are T = R·E steps of DP-SGD on the training set: the
global model after each round is the client's upload (FedAvg of one), and the ledger composes T
Poisson-subsampled Gaussian steps at q = B/n.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.rdp import RdpAccountant

from fedpriv.config import RunConfig
from fedpriv.data.client_source import client_source
from fedpriv.federated import build_perturbation, finish_update, local_update, release_rng
from fedpriv.models import build_model, get_flat
from simulations.runner import run

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "simulations" / "configs" / "dpsgd_centralized_digits.toml"


@pytest.mark.parametrize("perturbation", ["dpsgd", "geodp"])
def test_one_client_with_all_data_is_t_steps_of_central_training(tmp_path: Path, perturbation: str) -> None:
    values = {**tomllib.loads(CONFIG.read_text()), "rounds": 2, "local-steps": 3, "perturbation": perturbation}
    cfg = RunConfig.from_mapping(values)
    result = run(cfg, engine="fast", root=tmp_path)
    source = client_source(cfg)
    assert len(source) == 1
    x, y = source.client(0)  # the whole training set
    n = int(y.shape[0])
    assert n == int(source.train.y.shape[0])
    # the hand-written central loop: the same client step, R times, the upload is the next model
    model = build_model("lr", source.input_shape, source.num_classes, seed=cfg["seed"])
    w = get_flat(model)
    for r in (1, 2):
        res = local_update(model, w, torch.from_numpy(x), torch.from_numpy(y), cfg, server_round=r, client_id=0,
                           num_classes=source.num_classes)
        w, _ = finish_update(res, build_perturbation(cfg, batch_size=64), release_rng(cfg, server_round=r, client_id=0))
    assert torch.equal(torch.as_tensor(result.params).reshape(-1), w.to(torch.float32))
    privacy = result.summary["privacy"]
    q = 64 / n
    acc = RdpAccountant()
    acc.compose(SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(1.0)), 6))
    if perturbation == "dpsgd":
        assert privacy["epsilon_total_max"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    else:  # GeoDP states the conservative ε; the source's accounting is DP-SGD's
        assert privacy["epsilon_claimed_by_source_max"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert f"q = {q:.3g}" in privacy["epsilon_total_is"] and "6 noised steps" in privacy["epsilon_total_is"]
