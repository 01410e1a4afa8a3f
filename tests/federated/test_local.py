"""fedpriv.federated.local: the pure client step of federated LDP-SGD (docs/federated_ldp_sgd.md §2, §10.1).

Oracles are written here independently of the code under test: a float64 clipped-SGD loop with the
analytic logistic-regression gradient, a float64 MLP loop with ``loss.backward()`` on its own module,
and a per-example autograd loop for the per-sample gradients of GeoDP.

Tolerances against an oracle: the float32 code is off the float64 oracle by its float32 rounding
error, measured by running the same code on a float64 model (``_in64``); the comparison allows twice
that (``tests/_rounding.py`` gives the derivation; the oracle plays both float64 roles), so it holds
on any CPU and thread count.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

import fedpriv.federated.local as local_mod
from fedpriv.config import RunConfig
from fedpriv.federated import (
    LocalResult,
    Release,
    build_perturbation,
    clip_per_sample,
    effective_batch_size,
    finish_update,
    learning_rate,
    local_update,
    minibatch_indices,
    per_sample_grads,
    privacy_scope,
    release_rng,
    step_budget,
    step_noise_purpose,
)
from fedpriv.mechanisms.base import Guarantee
from fedpriv.models import build_model, get_flat
from fedpriv.perturbation import (
    Coordinatewise,
    GeoDP,
    LDPVec,
    NoPerturbation,
    Perturbation,
)
from fedpriv.rng import CounterRows, stream
from tests._rounding import assert_agree

SEED = 11


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Digits 8x8 scaled to [0, 1]: images (n, 1, 8, 8), labels 0-9, and the 0-4 vs 5-9 task."""
    X, Y = load_digits(return_X_y=True)
    x = torch.tensor(X / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(Y, dtype=torch.int64)
    return x, y, (y >= 5).to(torch.int64)


def _client(digits, k: int, n: int = 120):
    x, y, yb = digits
    sl = slice(k * n, (k + 1) * n)
    return x[sl], y[sl], yb[sl]


def _cfg(**values) -> RunConfig:
    base = {"seed": SEED, "local-steps": 5, "batch-size": 32, "lr": 0.1, "clip-norm": 0.5, "perturbation": "none",
            "noise-schedule": "last_step"}  # what these tests were written for, explicit (not the defaults)
    return RunConfig.from_mapping({**base, **{k.replace("_", "-"): v for k, v in values.items()}})


def _in64(model, *tensors):
    """A float64 copy of ``model`` and the float64 values of ``tensors`` (float tensors only)."""
    twin = build_model(model.name, model.input_shape, model.num_classes, seed=SEED).to(torch.float64)
    return (twin, *(t.to(torch.float64) if t.is_floating_point() else t for t in tensors))


def _upload(model, w, x, y, cfg, *, server_round, client_id, num_classes):
    res = local_update(model, w, x, y, cfg, server_round=server_round, client_id=client_id, num_classes=num_classes)
    p = build_perturbation(cfg, batch_size=effective_batch_size(cfg, res.num_examples))
    out, _ = finish_update(res, p, release_rng(cfg, server_round=server_round, client_id=client_id))
    return res, out


# ---------------------------------------------------------------------------------- reference loops

def _ref_batches(seed, server_round, client_id, n, b, steps):
    keys = CounterRows.keyed(seed, server_round, [client_id], "batch").uniform(steps * n).numpy().reshape(steps, n)
    return [np.argsort(row, kind="stable")[:min(b, n)] for row in keys]


def _ref_eta(eta0, schedule, t):
    return eta0 if schedule == "constant" else eta0 / (1 + t)


def _ref_clip(g, c):
    return g * min(1.0, c / float(np.linalg.norm(g)))


def _ref_lr_grad(w, x, y):
    """Analytic mean BCE gradient of the binary LR, flat as [weights, bias]: mean((sigmoid(z) - y) [x, 1])."""
    xa = np.hstack([x, np.ones((x.shape[0], 1))])
    p = 1.0 / (1.0 + np.exp(-(xa @ w)))
    return ((p - y)[:, None] * xa).mean(axis=0)


def _ref_lr_round(w0, x, y, *, seed, server_round, client_id, steps, b, eta0, schedule, clip):
    """Clipped FedAvg client (docs/federated_ldp_sgd.md §2 with n = 0), float64: E clipped SGD steps."""
    x = x.reshape(x.shape[0], -1).double().numpy()
    y = y.double().numpy()
    w = w0.double().numpy().copy()
    t0 = (server_round - 1) * steps
    for k, idx in enumerate(_ref_batches(seed, server_round, client_id, x.shape[0], b, steps)):
        w = w - _ref_eta(eta0, schedule, t0 + k) * _ref_clip(_ref_lr_grad(w, x[idx], y[idx]), clip)
    return w


def _ref_mlp_round(w0, x, y, *, seed, server_round, client_id, steps, b, eta0, schedule, clip):
    """Same loop for the MLP on its own float64 module, gradients by loss.backward()."""
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 200), torch.nn.Tanh(), torch.nn.Linear(200, 10))
    net = net.double()
    params = [net[1].weight, net[1].bias, net[3].weight, net[3].bias]
    off = 0
    with torch.no_grad():
        for p in params:
            p.copy_(w0[off:off + p.numel()].double().view_as(p))
            off += p.numel()
    t0 = (server_round - 1) * steps
    for k, idx in enumerate(_ref_batches(seed, server_round, client_id, x.shape[0], b, steps)):
        net.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x[idx].double()), y[idx])
        loss.backward()
        g = torch.cat([p.grad.reshape(-1) for p in params])
        g = g * min(1.0, clip / float(g.norm()))
        off = 0
        with torch.no_grad():
            for p in params:
                p -= _ref_eta(eta0, schedule, t0 + k) * g[off:off + p.numel()].view_as(p)
                off += p.numel()
    return torch.cat([p.detach().reshape(-1) for p in params])


# ---------------------------------------------------------------------------------- docs/federated_ldp_sgd.md §10, item
# 1

@pytest.mark.parametrize("steps, schedule, server_round, clip", [
    (1, "constant", 1, 0.5), (5, "constant", 2, 0.5), (5, "inverse", 3, 0.05), (4, "inverse", 1, 100.0)])
def test_no_noise_equals_clipped_fedavg_lr(digits, steps, schedule, server_round, clip) -> None:
    x, _, yb = _client(digits, 2)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    w0 = get_flat(model)
    cfg = _cfg(local_steps=steps, lr_schedule=schedule, clip_norm=clip)
    res, out = _upload(model, w0, x, yb, cfg, server_round=server_round, client_id=7, num_classes=2)
    _, out64 = _upload(*_in64(model, w0, x), yb, cfg, server_round=server_round, client_id=7, num_classes=2)
    ref = _ref_lr_round(w0, x, yb, seed=SEED, server_round=server_round, client_id=7, steps=steps, b=32,
                        eta0=0.1, schedule=schedule, clip=clip)
    assert out.dtype == torch.float32 and out.shape == (65,)
    assert_agree(out, ref, a64=out64, b64=ref, what="upload")
    assert res.num_examples == 120
    if clip in (0.05, 100.0):  # C = 0.05 clips every step, C = 100 none
        assert res.metrics["clip_fraction"] == (1.0 if clip < 1 else 0.0)


def test_no_noise_equals_clipped_fedavg_mlp_small_client(digits) -> None:
    x, y, _ = _client(digits, 0, n=20)  # n_k < B: every step uses all 20 examples
    model = build_model("mlp", (1, 8, 8), 10, seed=SEED)
    w0 = get_flat(model)
    cfg = _cfg(lr_schedule="inverse", clip_norm=0.3, lr=0.5)
    res, out = _upload(model, w0, x, y, cfg, server_round=2, client_id=4, num_classes=10)
    _, out64 = _upload(*_in64(model, w0, x), y, cfg, server_round=2, client_id=4, num_classes=10)
    ref = _ref_mlp_round(w0, x, y, seed=SEED, server_round=2, client_id=4, steps=5, b=32, eta0=0.5,
                         schedule="inverse", clip=0.3)
    assert_agree(out, ref, a64=out64, b64=ref, what="upload")
    assert res.metrics["batch_size"] == 20.0


# ---------------------------------------------------------------------------------- release / schedules

class _Counting:
    """Counts Perturbation.perturb calls (all subclasses) while installed."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        original = Perturbation.perturb

        def counted(p, update, rng):
            self.calls += 1
            return original(p, update, rng)

        monkeypatch.setattr(Perturbation, "perturb", counted)


@pytest.mark.parametrize("kind, extra", [
    ("coordinatewise", {"mechanism": "laplace"}),
    ("ldpvec", {"mechanism": "gaussian"}),
    ("geodp", {"sigma": 0.5}),
    ("dpsgd", {"sigma": 0.5}),
])
def test_last_step_perturbs_exactly_one_step_per_round(digits, monkeypatch, kind, extra) -> None:
    x, _, yb = _client(digits, 1)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    w0 = get_flat(model)
    cfg = _cfg(perturbation=kind, **extra)
    counter = _Counting(monkeypatch)
    res = local_update(model, w0, x, yb, cfg, server_round=1, client_id=3, num_classes=2)
    assert counter.calls == 0 and res.metrics["noised_inner_steps"] == 0
    p = build_perturbation(cfg, batch_size=32)
    _, metrics = finish_update(res, p, release_rng(cfg, server_round=1, client_id=3))
    assert counter.calls == 1
    assert "output_norm" in metrics
    if kind not in ("geodp", "dpsgd"):  # same clipping object: the release equals the noise-free run's, bit for bit
        clean = local_update(model, w0, x, yb, cfg.with_values({"perturbation": "none"}), server_round=1,
                             client_id=3, num_classes=2)
        assert torch.equal(res.release.base, clean.release.base)
        assert torch.equal(res.release.vector, clean.release.vector)
    assert res.release.scale == -0.1


def test_every_step_privatizes_the_inner_steps_with_keyed_streams(digits, monkeypatch) -> None:
    """A hand-written every_step loop: steps 1..E-1 noised with CounterRows.keyed(..., "noise-step-k") at eps/E."""
    x, _, yb = _client(digits, 3)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    w0 = get_flat(model)
    steps, eps, clip = 3, 30.0, 0.5
    cfg = _cfg(perturbation="coordinatewise", mechanism="laplace", noise_schedule="every_step",
               local_steps=steps, epsilon=eps, clip_norm=clip)
    counter = _Counting(monkeypatch)
    res = local_update(model, w0, x, yb, cfg, server_round=2, client_id=5, num_classes=2)
    assert counter.calls == steps - 1 and res.metrics["noised_inner_steps"] == steps - 1
    res64 = local_update(*_in64(model, w0, x), yb, cfg, server_round=2, client_id=5, num_classes=2)

    pert = Coordinatewise("laplace", eps / steps, clip_norm=clip)
    xs = x.reshape(120, -1).double().numpy()
    w = w0.double().numpy()
    batches = _ref_batches(SEED, 2, 5, 120, 32, steps)
    for k in range(1, steps):
        g = _ref_clip(_ref_lr_grad(w, xs[batches[k - 1]], yb[batches[k - 1]].double().numpy()), clip)
        noisy = pert.perturb(torch.from_numpy(g), CounterRows.keyed(SEED, 2, [5], f"noise-step-{k}")).vector.numpy()
        w = w - 0.1 * noisy
    g_last = _ref_clip(_ref_lr_grad(w, xs[batches[-1]], yb[batches[-1]].double().numpy()), clip)
    # the same keyed Laplace draws: float32 and float64 differ by rounding only (tests/_rounding.py)
    assert_agree(res.release.base, w, a64=res64.release.base, b64=w, what="base")
    assert_agree(res.release.vector, g_last, a64=res64.release.vector, b64=g_last, what="vector")
    assert step_noise_purpose(1) == "noise-step-1"


def test_every_step_inner_noise_has_the_eps_over_E_variance(digits) -> None:
    """E = 2: the step-1 noise is (w1_clean - w1_noisy)/eta0; its per-coordinate variance is 8 C^2 d/(eps/E)^2.

    C = 50 makes clipping and the [-1, 1] clamp inactive (|g_z| <= 1, so |t_z| <= sqrt(65)/50), so the
    recovered noise is exactly the Laplace noise. At eps instead of eps/E the variance is 4 times smaller.
    """
    x, _, yb = digits
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    w0 = get_flat(model)
    steps, eps, clip, eta0, d = 2, 4.0, 50.0, 0.1, 65
    noisy_cfg = _cfg(perturbation="coordinatewise", mechanism="laplace", noise_schedule="every_step",
                     local_steps=steps, epsilon=eps, clip_norm=clip, lr=eta0)
    clean_cfg = noisy_cfg.with_values({"perturbation": "none"})
    noise = []
    for client in range(200):
        sl = slice((client * 8) % 1700, (client * 8) % 1700 + 90)
        kw = {"server_round": 1, "client_id": client, "num_classes": 2}
        a = local_update(model, w0, x[sl], yb[sl], noisy_cfg, **kw).release.base.double()
        b = local_update(model, w0, x[sl], yb[sl], clean_cfg, **kw).release.base.double()
        noise.append(((b - a) / eta0).numpy())
    n = np.concatenate(noise)
    expected = 8 * clip**2 * d / (eps / steps) ** 2
    se = expected * math.sqrt(5 / n.size)  # Laplace: Var(X^2) = 5 sigma^4
    assert abs(float(np.mean(n**2)) - expected) < 5 * se
    assert abs(float(np.mean(n))) < 5 * math.sqrt(expected / n.size)
    wrong = 8 * clip**2 * d / eps**2  # the variance had the step used the whole eps
    assert abs(float(np.mean(n**2)) - wrong) > 20 * se


def test_with_one_step_both_schedules_coincide(digits) -> None:
    x, _, yb = _client(digits, 4)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    w0 = get_flat(model)
    outs = []
    for schedule in ("last_step", "every_step"):
        cfg = _cfg(perturbation="coordinatewise", mechanism="piecewise", local_steps=1, noise_schedule=schedule)
        outs.append(_upload(model, w0, x, yb, cfg, server_round=3, client_id=2, num_classes=2)[1])
        assert step_budget(cfg) == (1.0, 1e-5)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("server_round, steps", [(1, 1), (1, 3), (4, 3), (10, 5)])
def test_learning_rate_uses_the_global_iteration_counter(digits, server_round, steps) -> None:
    x, _, yb = _client(digits, 0)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    cfg = _cfg(lr_schedule="inverse", local_steps=steps, lr=0.3)
    res = local_update(model, get_flat(model), x, yb, cfg, server_round=server_round, client_id=0, num_classes=2)
    t_last = (server_round - 1) * steps + steps - 1
    assert res.release.scale == pytest.approx(-0.3 / (1 + t_last), rel=1e-15)
    assert res.metrics["lr_last"] == pytest.approx(0.3 / (1 + t_last), rel=1e-15)
    assert learning_rate(cfg, 0) == 0.3 and learning_rate(cfg, 9) == pytest.approx(0.03)
    assert learning_rate(_cfg(lr=0.3), 9) == 0.3


# ---------------------------------------------------------------------------------- GeoDP: per-sample clipping

def test_per_sample_grads_match_an_example_by_example_loop(digits) -> None:
    x, y, _ = _client(digits, 0, n=6)
    model = build_model("cnn", (1, 8, 8), 10, seed=SEED)
    w = get_flat(model)
    model64, w64, x64 = _in64(model, w, x)
    grads, losses = per_sample_grads(model, w, x, y, num_classes=10)
    grads64, losses64 = per_sample_grads(model64, w64, x64, y, num_classes=10)

    def one_by_one(net, xs, i):
        net.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xs[i:i + 1]), y[i:i + 1])
        loss.backward()
        return torch.cat([p.grad.reshape(-1) for p in net.parameters()]), loss.detach()

    for i in range(6):  # vmap and a loop run different kernels: equal within their float32 rounding errors
        (g, loss), (g64, loss64) = one_by_one(model, x, i), one_by_one(model64, x64, i)
        assert_agree(grads[i], g, a64=grads64[i], b64=g64, what=f"gradient {i}")
        assert_agree(losses[i], loss, a64=losses64[i], b64=loss64, what=f"loss {i}")


def test_per_sample_clipping_bounds_every_norm(digits) -> None:
    x, _, yb = _client(digits, 1, n=64)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    grads, _ = per_sample_grads(model, get_flat(model), x, yb, num_classes=2)
    grads = torch.cat([grads, torch.zeros(1, grads.shape[1])])  # a zero gradient stays zero
    c = float(torch.linalg.vector_norm(grads, dim=1)[:64].median())  # about half of them are clipped
    clipped, n_clipped = clip_per_sample(grads, c)
    norms = torch.linalg.vector_norm(clipped, dim=1)
    raw = torch.linalg.vector_norm(grads, dim=1)
    assert float(norms.max()) <= c * (1 + 1e-6)
    assert 0 < n_clipped < 64 and n_clipped == int((raw > c).sum())
    keep = raw <= c
    assert torch.equal(clipped[keep], grads[keep])
    torch.testing.assert_close(clipped[~keep] / norms[~keep, None], grads[~keep] / raw[~keep, None])


def test_geodp_release_is_the_mean_of_per_sample_clipped_gradients(digits, monkeypatch) -> None:
    x, _, yb = _client(digits, 2)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    w0 = get_flat(model)
    cfg = _cfg(perturbation="geodp", sigma=0.0, local_steps=1, clip_norm=0.8)
    res = local_update(model, w0, x, yb, cfg, server_round=2, client_id=9, num_classes=2)
    res64 = local_update(*_in64(model, w0, x), yb, cfg, server_round=2, client_id=9, num_classes=2)
    idx = _ref_batches(SEED, 2, 9, 120, 32, 1)[0]
    xa = np.hstack([x[idx].reshape(32, -1).double().numpy(), np.ones((32, 1))])
    p = 1 / (1 + np.exp(-(xa @ w0.double().numpy())))
    per = (p - yb[idx].double().numpy())[:, None] * xa
    per = per * np.minimum(1.0, 0.8 / np.linalg.norm(per, axis=1))[:, None]
    assert_agree(res.release.vector, per.mean(axis=0), a64=res64.release.vector, b64=per.mean(axis=0), what="vector")
    assert float(res.release.vector.norm()) <= 0.8 * (1 + 1e-6)
    assert torch.equal(res.release.base, w0)
    # the minibatch-mean path (any other perturbation) clips a different object
    mean_res = local_update(model, w0, x, yb, cfg.with_values({"perturbation": "none"}), server_round=2,
                            client_id=9, num_classes=2)
    assert not torch.allclose(mean_res.release.vector, res.release.vector)
    # chunked per-sample computation gives the same release
    monkeypatch.setattr(local_mod, "PER_SAMPLE_CHUNK_FLOATS", 65 * 5)
    chunked = local_update(model, w0, x, yb, cfg, server_round=2, client_id=9, num_classes=2)
    torch.testing.assert_close(chunked.release.vector, res.release.vector, rtol=1e-6, atol=1e-7)
    # sigma = 0, region none: GeoDP is the identity up to float64 transform rounding (docs/geodp.md §9, item 1)
    out, _ = finish_update(res, build_perturbation(cfg, batch_size=32), release_rng(cfg, server_round=2, client_id=9))
    torch.testing.assert_close(out, w0 + res.release.scale * res.release.vector, rtol=0, atol=1e-6)
    # DP-SGD shares the per-sample path: the same release bit for bit; sigma = 0 adds exactly nothing
    dp_cfg = cfg.with_values({"perturbation": "dpsgd"})
    dp = local_update(model, w0, x, yb, dp_cfg, server_round=2, client_id=9, num_classes=2)
    assert torch.equal(dp.release.vector, chunked.release.vector)  # (the chunk size is still patched)
    out, _ = finish_update(dp, build_perturbation(dp_cfg, batch_size=32), release_rng(cfg, server_round=2, client_id=9))
    torch.testing.assert_close(out, w0 + dp.release.scale * dp.release.vector, rtol=0, atol=0)


# ---------------------------------------------------------------------------------- finish_update

class _Affine(Perturbation):
    """A deterministic stand-in: 2 v + 1."""

    name = "affine-test"

    def _perturb(self, flat, rng):
        return 2 * flat + 1, {"marker": 7.0}

    def guarantee_for(self, d):
        return Guarantee(epsilon=math.inf, holds=False)

    def config(self):
        return {}


def test_finish_update_arithmetic() -> None:
    base = torch.tensor([1.0, -2.0, 0.5])
    vec = torch.tensor([0.25, 0.0, -1.0])
    res = LocalResult(release=Release(base=base, vector=vec, scale=-0.1), num_examples=4)
    out, metrics = finish_update(res, _Affine(), stream(0, 1, 0, "noise"))
    assert torch.equal(out, base + (-0.1) * (2 * vec + 1))
    assert metrics["marker"] == 7.0
    out_none, _ = finish_update(res, NoPerturbation(), stream(0, 1, 0, "noise"))
    assert torch.equal(out_none, base - 0.1 * vec)


def test_finish_update_adds_exactly_the_scaled_noise(digits) -> None:
    x, _, yb = _client(digits, 5)
    model = build_model("lr", (1, 8, 8), 2, seed=SEED)
    cfg = _cfg(perturbation="coordinatewise", mechanism="gaussian", epsilon=2.0)
    res = local_update(model, get_flat(model), x, yb, cfg, server_round=1, client_id=1, num_classes=2)
    p = build_perturbation(cfg, batch_size=32)
    out, _ = finish_update(res, p, release_rng(cfg, server_round=1, client_id=1))
    noisy = p.perturb(res.release.vector, CounterRows.keyed(SEED, 1, [1], "noise")).vector
    assert torch.equal(out, res.release.base + res.release.scale * noisy)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"base": torch.zeros(3), "vector": torch.zeros(4), "scale": -0.1}, ValueError, "same shape"),
    ({"base": torch.zeros(3, 1), "vector": torch.zeros(3), "scale": -0.1}, TypeError, "1-D"),
    ({"base": torch.zeros(3), "vector": torch.zeros(3), "scale": math.nan}, ValueError, "scale must be a finite number"),
])
def test_release_validates(kwargs, exc, match) -> None:
    with pytest.raises(exc, match=match):
        Release(**kwargs)


def test_finish_update_rejects_wrong_types() -> None:
    res = LocalResult(release=Release(torch.zeros(2), torch.zeros(2), -0.1), num_examples=1)
    with pytest.raises(TypeError, match="LocalResult"):
        finish_update(res.release, NoPerturbation(), stream(0, 1, 0, "noise"))
    with pytest.raises(TypeError, match="Perturbation"):
        finish_update(res, "none", stream(0, 1, 0, "noise"))
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        finish_update(res, NoPerturbation(), 3)


# ---------------------------------------------------------------------------------- determinism and purity

@pytest.mark.parametrize("name, shape, classes, kind", [
    ("lr", (1, 8, 8), 2, "ldpvec"), ("mlp", (1, 8, 8), 10, "coordinatewise"), ("cnn", (1, 8, 8), 10, "geodp")])
def test_same_keys_same_bits_other_keys_other_draws(digits, name, shape, classes, kind) -> None:
    x, y, yb = _client(digits, 6, n=50)
    labels = yb if classes == 2 else y
    model = build_model(name, shape, classes, seed=SEED)
    w0 = get_flat(model)
    w0_copy = w0.clone()
    cfg = _cfg(perturbation=kind, mechanism="laplace", noise_schedule="every_step", local_steps=3, sigma=0.1)
    kw = {"num_classes": classes}
    r1, o1 = _upload(model, w0, x, labels, cfg, server_round=2, client_id=8, **kw)
    r2, o2 = _upload(model, w0, x, labels, cfg, server_round=2, client_id=8, **kw)
    assert torch.equal(o1, o2) and torch.equal(r1.release.base, r2.release.base)
    assert r1.metrics == r2.metrics
    assert torch.equal(w0, w0_copy) and torch.equal(get_flat(model), w0)  # inputs and model untouched
    assert torch.isfinite(o1).all() and o1.shape == w0.shape
    _, o3 = _upload(model, w0, x, labels, cfg, server_round=2, client_id=9, **kw)
    _, o4 = _upload(model, w0, x, labels, cfg, server_round=3, client_id=8, **kw)
    assert not torch.equal(o1, o3) and not torch.equal(o1, o4)


def test_minibatch_indices_are_distinct_within_a_step() -> None:
    idx = minibatch_indices(0, 1, 2, num_examples=40, batch_size=32, steps=6)
    assert idx.shape == (6, 32)
    assert all(len(set(row)) == 32 for row in idx.tolist())
    assert minibatch_indices(0, 1, 2, num_examples=10, batch_size=32, steps=2).shape == (2, 10)
    assert np.array_equal(idx, minibatch_indices(0, 1, 2, num_examples=40, batch_size=32, steps=6))


# ---------------------------------------------------------------------------------- build_perturbation, scope

def test_build_perturbation_maps_the_config() -> None:
    p = build_perturbation(_cfg(perturbation="none"), batch_size=8)
    assert isinstance(p, NoPerturbation) and math.isinf(p.clip_norm)
    p = build_perturbation(_cfg(perturbation="coordinatewise", mechanism="gaussian", epsilon=3.0,
                                budget_mode="per_coordinate", delta=1e-6), batch_size=8)
    assert isinstance(p, Coordinatewise)
    assert (p.epsilon, p.delta, p.clip_norm, p.budget_mode) == (3.0, 1e-6, 0.5, "per_coordinate")
    p = build_perturbation(_cfg(perturbation="coordinatewise", mechanism="piecewise", epsilon=3.0,
                                noise_schedule="every_step", local_steps=4), batch_size=8)
    assert p.epsilon == 0.75 and p.delta is None
    p = build_perturbation(_cfg(perturbation="ldpvec", mechanism="gaussian", beta=0.5, magnitude="keep",
                                noise_schedule="every_step", local_steps=4, delta=1e-5), batch_size=8)
    assert isinstance(p, LDPVec)
    assert (p.epsilon, p.delta, p.region, p.beta, p.magnitude) == (0.25, 2.5e-6, "centered", 0.5, "keep")
    p = build_perturbation(_cfg(perturbation="geodp", sigma=2.0, beta=0.1, angle_noise_scale="unscaled"),
                           batch_size=20)
    assert isinstance(p, GeoDP)
    assert (p.sigma, p.batch_size, p.region, p.beta, p.angle_noise_scale) == (2.0, 20, "none", 0.1, "unscaled")
    assert build_perturbation(_cfg(perturbation="geodp", region="thesis"), batch_size=20).region == "thesis"
    assert effective_batch_size(_cfg(), 10) == 10 and effective_batch_size(_cfg(), 100) == 32


def test_privacy_scope_statements() -> None:
    last = privacy_scope(_cfg(perturbation="coordinatewise", mechanism="laplace", local_steps=5))
    assert last.startswith("WARNING") and "4 clean local step(s)" in last and "NOT" in last
    every = privacy_scope(_cfg(perturbation="coordinatewise", mechanism="laplace", local_steps=5,
                               noise_schedule="every_step", epsilon=2.0, rounds=10))
    assert not every.startswith("WARNING") and "epsilon/E" in every and "0.4-LDP" in every and "20 per client" in every
    one = privacy_scope(_cfg(perturbation="ldpvec", mechanism="gaussian", local_steps=1))
    assert not one.startswith("WARNING") and "coincide" in one and "RDP" in one
    assert "claim does not hold" in privacy_scope(_cfg(perturbation="ldpvec", mechanism="laplace", local_steps=1,
                                                       region="none", beta=0.5))
    geo = privacy_scope(_cfg(perturbation="geodp", noise_schedule="every_step"))
    assert "sample-level central DP" in geo and not geo.startswith("WARNING")
    assert privacy_scope(_cfg(perturbation="geodp")).startswith("WARNING")
    assert "no privacy" in privacy_scope(_cfg())


@pytest.mark.parametrize("control", ["skip", "random-direction", "permute"])
def test_ldpvec_control_is_built_warned_and_never_counted_as_private(control: str) -> None:
    """ldpvec-control builds the LDPVec control; the scope warns it is a control; the round's claim does not hold."""
    from fedpriv.results import round_spend

    cfg = _cfg(perturbation="ldpvec", mechanism="laplace", local_steps=1, ldpvec_control=control)
    pert = build_perturbation(cfg, batch_size=32)
    assert isinstance(pert, LDPVec) and pert.control == control
    scope = privacy_scope(cfg)
    assert scope.startswith(f"WARNING: ldpvec-control={control!r}: a CONTROL run, not a private release")
    spend = round_spend(cfg, pert, 650, 1)
    assert not spend.holds and f"control '{control}', not a private release" in spend.note
    assert spend.epsilon == (math.inf if control == "skip" else 1.0)
    plain = _cfg(perturbation="ldpvec", mechanism="laplace", local_steps=1)
    assert round_spend(plain, build_perturbation(plain, batch_size=32), 650, 1).holds


def test_ldpvec_control_needs_ldpvec() -> None:
    with pytest.raises(ValueError, match="ldpvec-control applies to perturbation = 'ldpvec' only"):
        build_perturbation(_cfg(perturbation="coordinatewise", ldpvec_control="skip"), batch_size=32)


# ---------------------------------------------------------------------------------- bad inputs

def _bad_inputs(digits):
    x, _, yb = _client(digits, 0, n=40)
    d = 65
    return [
        ({"x": x[:0], "y": yb[:0]}, ValueError, "client data must be non-empty"),
        ({"y": yb[:39]}, ValueError, "same number of examples"),
        ({"y": yb.reshape(40, 1)}, ValueError, "1-D tensor of labels"),
        ({"x": torch.zeros(40, 1, 7, 7)}, ValueError, r"examples of shape \(1, 8, 8\)"),
        ({"x": x.clone().index_fill_(0, torch.tensor([3]), math.nan)}, ValueError, "x must be finite"),
        ({"x": (x * 16).to(torch.int64)}, TypeError, "x must be floating-point"),
        ({"y": yb + 1}, ValueError, r"labels in \[0, 1\]"),
        ({"y": yb.double()}, TypeError, "integer class labels"),
        ({"w": torch.zeros(d - 1)}, ValueError, "global_params must be a 1-D vector of the model's 65"),
        ({"w": torch.full((d,), math.inf)}, ValueError, "global_params must be finite"),
        ({"w": [0.0] * d}, TypeError, "global_params must be a torch.Tensor"),
        ({"server_round": 0}, ValueError, "server_round must be >= 1"),
        ({"client_id": -1}, ValueError, "client_id must be >= 0"),
        ({"num_classes": 10}, ValueError, "num_classes must match"),
        ({"config": {"lr": 0.1}}, TypeError, "RunConfig"),
        ({"model": "lr"}, TypeError, "torch.nn.Module"),
    ]


@pytest.mark.parametrize("case", range(16))
def test_local_update_rejects_bad_inputs(digits, case) -> None:
    changes, exc, match = _bad_inputs(digits)[case]
    x, _, yb = _client(digits, 0, n=40)
    model = build_model("lr", (1, 8, 8), 2, seed=0)
    args = {"model": model, "w": get_flat(model), "x": x, "y": yb, "config": _cfg(), "server_round": 1,
            "client_id": 0, "num_classes": 2, **changes}
    with pytest.raises(exc, match=match):
        local_update(args["model"], args["w"], args["x"], args["y"], args["config"],
                     server_round=args["server_round"], client_id=args["client_id"], num_classes=args["num_classes"])


def test_numpy_inputs_and_flattened_features_are_accepted(digits) -> None:
    x, _, yb = _client(digits, 0, n=40)
    model = build_model("lr", (1, 8, 8), 2, seed=0)
    a = local_update(model, get_flat(model).numpy(), x.reshape(40, 64).double().numpy(), yb.numpy(), _cfg(),
                     server_round=1, client_id=0, num_classes=2)
    b = local_update(model, get_flat(model), x, yb, _cfg(), server_round=1, client_id=0, num_classes=2)
    assert torch.equal(a.release.base, b.release.base)


def test_divergence_raises_floating_point_error(digits) -> None:
    x, _, yb = _client(digits, 0, n=40)
    model = build_model("lr", (1, 8, 8), 2, seed=0)
    with pytest.raises(FloatingPointError, match="diverged"):
        local_update(model, torch.full((65,), 3e38), x, yb, _cfg(), server_round=1, client_id=0, num_classes=2)
