"""fedpriv.federated.batched: many clients' local training and privatization at once equals the per-client path.

The reference is :func:`local_update` + :func:`finish_update`, client by client. Both run float32
arithmetic on the same minibatches and noise draws; only the reduction order of the batched
matmuls differs, so the tolerance is 16 float32 ulps of each quantity's largest entry (the
per-step relative rounding, ~1e-7, carried through E steps and the perturbation's scaling).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpriv.config import RunConfig
from fedpriv.federated.batched import batched_finish, batched_local_update, client_bytes
from fedpriv.federated.local import (
    build_perturbation,
    effective_batch_size,
    finish_update,
    local_update,
    release_rng,
)
from fedpriv.models import build_model, get_flat

SEED = 5
CASES = {
    "none": {"perturbation": "none"},
    "coordinatewise-piecewise": {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0},
    "coordinatewise-laplace-sampled": {"perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 2.0,
                                       "sample-dims": 20},
    "coordinatewise-gaussian-every-step": {"perturbation": "coordinatewise", "mechanism": "gaussian",
                                           "epsilon": 4.0, "noise-schedule": "every_step"},
    "ldpvec-gaussian": {"perturbation": "ldpvec", "mechanism": "gaussian", "epsilon": 5.0},
    "ldpvec-piecewise": {"perturbation": "ldpvec", "mechanism": "piecewise", "epsilon": 5.0},
    "geodp-every-step": {"perturbation": "geodp", "sigma": 0.5, "noise-schedule": "every_step"},
}


def _cfg(**values) -> RunConfig:
    base = {"seed": SEED, "local-steps": 3, "batch-size": 8, "lr": 0.1, "clip-norm": 0.5}
    return RunConfig.from_mapping({**base, **values})


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor, list[np.ndarray]]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (60,), generator=gen)
    # unequal clients: 20, 12, 8 (= B), 5 (< B: padded minibatches), 15 examples
    sizes = [20, 12, 8, 5, 15]
    bounds = np.cumsum([0, *sizes])
    parts = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    return x, y, parts


def _reference(model, w, x, y, parts, cfg, ids, server_round):
    results, uploads = [], []
    for cid, idx in zip(ids, parts):
        res = local_update(model, w, x[idx], y[idx], cfg, server_round=server_round, client_id=cid, num_classes=10)
        pert = build_perturbation(cfg, batch_size=effective_batch_size(cfg, res.num_examples))
        up, _ = finish_update(res, pert, release_rng(cfg, server_round=server_round, client_id=cid))
        results.append(res)
        uploads.append(up)
    return results, torch.stack(uploads)


def _close(a: torch.Tensor, b: torch.Tensor, ulps: float = 16) -> None:
    scale = float(b.abs().max())
    tol = ulps * float(np.spacing(np.float32(scale))) if scale > 0 else 1e-30
    torch.testing.assert_close(a, b, rtol=0, atol=tol)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("model_name", ["lr", "cnn"])
def test_batched_clients_equal_the_per_client_path(case, model_name, data) -> None:
    x, y, parts = data
    cfg = _cfg(model=model_name, **CASES[case])
    model = build_model(model_name, (1, 8, 8), 10, seed=SEED)
    w = get_flat(model) + 0.01
    ids = [7, 3, 11, 0, 42]
    refs, ref_up = _reference(model, w, x, y, parts, cfg, ids, server_round=2)
    res = batched_local_update(model, w, x, y, parts, cfg, server_round=2, client_ids=ids, num_classes=10)
    assert not res.failed
    assert res.scale == refs[0].release.scale
    _close(res.base, torch.stack([r.release.base for r in refs]))
    _close(res.vector, torch.stack([r.release.vector for r in refs]))
    assert list(res.num_examples) == [r.num_examples for r in refs]
    for key in ("train_loss", "clip_fraction", "grad_norm_last", "release_norm", "lr_last", "batch_size",
                "privacy_claim"):
        np.testing.assert_allclose(res.metrics[key], [r.metrics[key] for r in refs], rtol=1e-5, err_msg=key)
    uploads, claims = batched_finish(res, lambda b: build_perturbation(cfg, batch_size=b), cfg, server_round=2)
    _close(uploads, ref_up)
    assert claims.dtype == bool and claims.shape == (len(ids),)


def test_a_diverging_client_is_reported_and_the_others_are_untouched(data) -> None:
    x, y, parts = data
    cfg = _cfg(model="lr", perturbation="none")
    model = build_model("lr", (1, 8, 8), 10, seed=SEED)
    x = x.clone()
    x[parts[1]] = 3e38  # client 1's examples overflow the loss: its training diverges at step 1
    w = get_flat(model)
    res = batched_local_update(model, w, x, y, parts, cfg, server_round=1, client_ids=[0, 1, 2, 3, 4], num_classes=10)
    with pytest.raises(FloatingPointError) as info:
        local_update(model, w, x[parts[1]], y[parts[1]], cfg, server_round=1, client_id=1, num_classes=10)
    assert list(res.failed) == [1]
    assert isinstance(res.failed[1], FloatingPointError) and str(res.failed[1]) == str(info.value)
    assert torch.equal(res.base[1], torch.zeros_like(res.base[1]))
    refs, _ = _reference(model, w, x, y, [parts[0]], cfg, [0], server_round=1)
    _close(res.base[0], refs[0].release.base)
    uploads, _ = batched_finish(res, lambda b: build_perturbation(cfg, batch_size=b), cfg, server_round=1)
    assert bool(torch.isfinite(uploads).all())


def test_bad_input_is_refused(data) -> None:
    x, y, parts = data
    cfg = _cfg(model="lr")
    model = build_model("lr", (1, 8, 8), 10, seed=SEED)
    w = get_flat(model)
    with pytest.raises(ValueError, match="same length"):
        batched_local_update(model, w, x, y, parts, cfg, server_round=1, client_ids=[0, 1], num_classes=10)
    with pytest.raises(ValueError, match="non-empty: client 9"):
        batched_local_update(model, w, x, y, [parts[0], np.array([], dtype=np.int64)], cfg, server_round=1,
                             client_ids=[0, 9], num_classes=10)
    with pytest.raises(ValueError, match="global_params"):
        batched_local_update(model, w[:-1], x, y, parts, cfg, server_round=1, client_ids=range(5), num_classes=10)


def test_client_bytes_grows_with_the_model_and_geodp() -> None:
    small = build_model("lr", (1, 8, 8), 10, seed=0)
    big = build_model("cnn", (1, 8, 8), 10, seed=0)
    cfg = _cfg(model="lr")
    assert client_bytes(big, cfg, (1, 8, 8)) > client_bytes(small, cfg, (1, 8, 8)) > 16 * 4 * 650
    assert client_bytes(small, _cfg(perturbation="geodp", sigma=1.0), (1, 8, 8)) > client_bytes(small, cfg, (1, 8, 8))
