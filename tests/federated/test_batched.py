"""fedpriv.federated.batched: many clients' local training and privatization at once equals the per-client path.

The reference is :func:`local_update` + :func:`finish_update`, client by client. Both run the same
minibatches and noise draws; the batched path's vmapped kernels order and block their reductions
differently, so the two agree within their float32 rounding errors, measured by running both paths
again in float64 (the derivation is in ``tests/_rounding.py``), at any CPU and torch thread count.
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
from tests._rounding import assert_agree, torch_threads

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
    "dpsgd-every-step": {"perturbation": "dpsgd", "sigma": 0.5, "noise-schedule": "every_step"},
    "geodp-auto-s": {"perturbation": "geodp", "sigma": 0.5, "clipping": "auto-s", "auto-s-gamma": 0.05},
}


def _cfg(**values) -> RunConfig:
    base = {"seed": SEED, "local-steps": 3, "batch-size": 8, "lr": 0.1, "clip-norm": 0.5, "perturbation": "none",
            "noise-schedule": "last_step"}  # explicit, not the defaults
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


METRICS = ("train_loss", "clip_fraction", "grad_norm_last", "release_norm", "lr_last", "batch_size", "privacy_claim")


def _both_paths(model_name, cfg, data, dtype, ids=(7, 3, 11, 0, 42)):
    """The per-client and the batched path on the same inputs, run in ``dtype``: two dicts of outputs."""
    x, y, parts = data
    model = build_model(model_name, (1, 8, 8), 10, seed=SEED)
    w = (get_flat(model) + 0.01).to(dtype)  # the float32 start, exactly, in either precision
    model, x = model.to(dtype), x.to(dtype)
    refs, ref_up = _reference(model, w, x, y, parts, cfg, ids, server_round=2)
    res = batched_local_update(model, w, x, y, parts, cfg, server_round=2, client_ids=ids, num_classes=10)
    assert not res.failed
    assert res.scale == refs[0].release.scale
    assert list(res.num_examples) == [r.num_examples for r in refs]
    uploads, claims = batched_finish(res, lambda b: build_perturbation(cfg, batch_size=b), cfg, server_round=2)
    assert claims.dtype == bool and claims.shape == (len(ids),)
    np.testing.assert_array_equal(claims, [r.metrics["privacy_claim"] != 0 for r in refs])
    per_client = {"base": torch.stack([r.release.base for r in refs]),
                  "vector": torch.stack([r.release.vector for r in refs]), "upload": ref_up,
                  **{k: np.array([r.metrics[k] for r in refs]) for k in METRICS}}
    batched = {"base": res.base, "vector": res.vector, "upload": uploads, **{k: res.metrics[k] for k in METRICS}}
    return per_client, batched


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("model_name", ["lr", "cnn"])
def test_batched_clients_equal_the_per_client_path(case, model_name, threads, data) -> None:
    cfg = _cfg(model=model_name, **CASES[case])
    with torch_threads(threads):  # both paths at this thread count; restored afterwards
        ref32, got32 = _both_paths(model_name, cfg, data, torch.float32)
        ref64, got64 = _both_paths(model_name, cfg, data, torch.float64)
    assert got32["base"].dtype == ref32["base"].dtype == torch.float32
    for key in ref32:  # per client: within the two paths' float32 rounding errors (tests/_rounding.py)
        assert_agree(got32[key], ref32[key], a64=got64[key], b64=ref64[key], rows=True, what=key)
    for key in ("lr_last", "batch_size"):  # the same Python arithmetic in both paths
        np.testing.assert_array_equal(got32[key], ref32[key], err_msg=key)


def test_a_diverging_client_is_reported_and_the_others_are_untouched(data) -> None:
    x, y, parts = data
    cfg = _cfg(model="lr", perturbation="none")
    model = build_model("lr", (1, 8, 8), 10, seed=SEED)
    x = x.clone()
    x[parts[1]] = 3e38  # client 1's examples overflow the float32 loss: its training diverges at step 1
    w = get_flat(model)
    res = batched_local_update(model, w, x, y, parts, cfg, server_round=1, client_ids=[0, 1, 2, 3, 4], num_classes=10)
    with pytest.raises(FloatingPointError) as info:
        local_update(model, w, x[parts[1]], y[parts[1]], cfg, server_round=1, client_id=1, num_classes=10)
    assert list(res.failed) == [1]
    assert isinstance(res.failed[1], FloatingPointError) and str(res.failed[1]) == str(info.value)
    assert torch.equal(res.base[1], torch.zeros_like(res.base[1]))
    refs, _ = _reference(model, w, x, y, [parts[0]], cfg, [0], server_round=1)
    # client 0 alone, both paths again in float64 (client 1 does not overflow there; rows are independent)
    model64 = build_model("lr", (1, 8, 8), 10, seed=SEED).to(torch.float64)
    w64, x64 = w.to(torch.float64), x.to(torch.float64)
    res64 = batched_local_update(model64, w64, x64, y, parts, cfg, server_round=1, client_ids=[0, 1, 2, 3, 4],
                                 num_classes=10)
    refs64, _ = _reference(model64, w64, x64, y, [parts[0]], cfg, [0], server_round=1)
    assert_agree(res.base[0], refs[0].release.base, a64=res64.base[0], b64=refs64[0].release.base, what="base")
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


def _batched_on(device: str, cfg: RunConfig, data, dtype) -> dict[str, torch.Tensor]:
    """The batched path's base, vector and uploads (on the CPU) with run-config key ``device``."""
    x, y, parts = data
    cfg = cfg.with_values({"device": device})
    model = build_model("lr", (1, 8, 8), 10, seed=SEED).to(dtype)
    w = (get_flat(model) + 0.01).to(dtype)
    res = batched_local_update(model, w, x.to(dtype), y, parts, cfg, server_round=2, client_ids=(7, 3, 11, 0, 42),
                               num_classes=10)
    uploads, _ = batched_finish(res, lambda b: build_perturbation(cfg, batch_size=b), cfg, server_round=2)
    return {"base": res.base.cpu(), "vector": res.vector.cpu(), "upload": uploads}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("case", ["coordinatewise-gaussian-every-step", "coordinatewise-piecewise", "ldpvec-gaussian"])
def test_batched_on_a_gpu_equals_the_cpu_within_rounding(case, data) -> None:
    """Same minibatches and noise bits on both devices; the GPU's float reductions round differently, so the
    two agree within their float32 rounding errors (measured against float64 runs, tests/_rounding.py)."""
    cfg = _cfg(model="lr", **CASES[case])
    cpu32, gpu32 = _batched_on("cpu", cfg, data, torch.float32), _batched_on("cuda", cfg, data, torch.float32)
    cpu64, gpu64 = _batched_on("cpu", cfg, data, torch.float64), _batched_on("cuda", cfg, data, torch.float64)
    for key in cpu32:
        assert_agree(gpu32[key], cpu32[key], a64=gpu64[key], b64=cpu64[key], rows=True, what=key)


def test_device_cuda_without_a_gpu_is_refused_naming_the_key(data, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="run-config key 'device'"):
        _batched_on("cuda", _cfg(model="lr"), data, torch.float32)
