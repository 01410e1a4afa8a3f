"""fedpriv.models: the thesis models, their parameter counts, keyed initialization and flat helpers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedpriv.models import (
    accuracy,
    build_model,
    evaluate,
    forward_flat,
    get_flat,
    num_params,
    predict,
    set_flat,
    task_loss,
    unflatten,
)


def _linear(i: int, o: int) -> int:
    return (i + 1) * o


def _conv(ci: int, co: int, k: int = 5) -> int:
    return ci * co * k * k + co


# counts from the layer formulas (the spec's corrected CNN total is 70,340, not the printed 70,540)
@pytest.mark.parametrize("name, shape, classes, expected", [
    ("lr", (1, 28, 28), 2, 785),
    ("lr", (1, 28, 28), 10, _linear(784, 10)),
    ("lr", (30,), 2, 31),
    ("mlp", (3, 32, 32), 10, 616_610),
    ("mlp", (1, 8, 8), 10, _linear(64, 200) + _linear(200, 10)),
    ("cnn", (3, 32, 32), 10, 70_340),
    ("cnn", (3, 32, 32), 10, _conv(3, 10) + _conv(10, 20) + _linear(8 * 8 * 20, 50) + _linear(50, 10)),
    ("cnn", (1, 28, 28), 10, _conv(1, 10) + _conv(10, 20) + _linear(7 * 7 * 20, 50) + _linear(50, 10)),
    ("cnn", (1, 8, 8), 10, _conv(1, 10) + _conv(10, 20) + _linear(2 * 2 * 20, 50) + _linear(50, 10)),
    # the GeoDP experiments' 2-layer CNN (thesis Table 5.2: d = 21,840 on MNIST): 28 → 24 → 12 → 8 → 4, 20·4·4 = 320
    ("cnn-thesis", (1, 28, 28), 10, 21_840),
    ("cnn-thesis", (1, 28, 28), 10, _conv(1, 10) + _conv(10, 20) + _linear(320, 50) + _linear(50, 10)),
    ("cnn-thesis", (1, 16, 16), 10, _conv(1, 10) + _conv(10, 20) + _linear(20, 50) + _linear(50, 10)),
])
def test_parameter_counts(name: str, shape: tuple, classes: int, expected: int) -> None:
    model = build_model(name, shape, classes, seed=0)
    assert num_params(model) == expected
    assert get_flat(model).shape == (expected,)
    out = model(torch.zeros(3, *shape))
    assert out.shape == (3, 1 if (name == "lr" and classes == 2) else classes)
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_lr_flat_order_is_weights_then_bias() -> None:
    model = build_model("lr", (1, 28, 28), 2, seed=3)
    flat = get_flat(model)
    assert torch.equal(flat[:784], model.linear.weight.detach().reshape(-1))
    assert torch.equal(flat[-1:], model.linear.bias.detach())


@pytest.mark.parametrize("name, shape", [("lr", (1, 8, 8)), ("mlp", (3, 32, 32)), ("cnn", (3, 32, 32)),
                                         ("cnn-thesis", (1, 28, 28))])
def test_init_is_keyed_and_leaves_global_rng_alone(name: str, shape: tuple) -> None:
    state = torch.get_rng_state()
    a, b, c = (get_flat(build_model(name, shape, 10, seed=s)) for s in (5, 5, 6))
    assert torch.equal(torch.get_rng_state(), state)  # no torch.manual_seed, no global draw
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_init_follows_torch_default_law() -> None:
    # every weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)): bound, and variance b^2/3 within 5 SE
    model = build_model("mlp", (3, 32, 32), 10, seed=1)
    w = model.fc1.weight.detach().double().reshape(-1)
    bound = 1 / math.sqrt(3072)
    assert float(w.abs().max()) <= bound
    n = w.numel()
    var_u = bound**2 / 3
    se = math.sqrt((bound**4 / 5 - var_u**2) / n)  # Var(U^2) = E U^4 - (E U^2)^2
    assert abs(float((w**2).mean()) - var_u) < 5 * se
    assert abs(float(w.mean())) < 5 * math.sqrt(var_u / n)
    assert float(model.fc2.bias.detach().abs().max()) <= 1 / math.sqrt(200)


def test_set_flat_round_trip_and_forward_flat_leaves_model_untouched() -> None:
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    before = get_flat(model)
    other = get_flat(build_model("cnn", (1, 8, 8), 10, seed=9))
    x = torch.linspace(0, 1, 5 * 64).reshape(5, 1, 8, 8)
    logits = forward_flat(model, other, x)
    assert torch.equal(get_flat(model), before)
    set_flat(model, other)
    assert torch.equal(get_flat(model), other)
    assert torch.allclose(model(x), logits, atol=1e-6)
    views = unflatten(model, other)
    assert list(views) == [n for n, _ in model.named_parameters()]
    assert all(views[n].shape == p.shape for n, p in model.named_parameters())


@pytest.mark.parametrize("flat, exc, match", [
    (torch.zeros(64), ValueError, "1-D tensor of 65"),
    (torch.zeros(65, 1), ValueError, "1-D tensor of 65"),
    (torch.zeros(65, dtype=torch.int64), TypeError, "floating-point"),
    ([0.0] * 65, TypeError, "torch.Tensor"),
])
def test_set_flat_rejects_bad_vectors(flat, exc, match) -> None:
    model = build_model("lr", (1, 8, 8), 2, seed=0)
    with pytest.raises(exc, match=match):
        set_flat(model, flat)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"name": "resnet"}, ValueError, "name must be one of"),
    ({"num_classes": 1}, ValueError, "num_classes must be >= 2"),
    ({"seed": -1}, ValueError, "seed must be >= 0"),
    ({"input_shape": ()}, ValueError, "input_shape"),
    ({"input_shape": (1, 0, 8)}, ValueError, "input_shape entries must be >= 1"),
    ({"name": "cnn", "input_shape": (28, 28)}, ValueError, r"\(channels, height, width\)"),
    ({"name": "cnn", "input_shape": (1, 3, 28)}, ValueError, "two 2x2 max-poolings"),
])
def test_build_model_rejects_bad_arguments(kwargs, exc, match) -> None:
    args = {"name": "lr", "input_shape": (1, 8, 8), "num_classes": 10, "seed": 0, **kwargs}
    with pytest.raises(exc, match=match):
        build_model(args.pop("name"), args.pop("input_shape"), args.pop("num_classes"), seed=args["seed"])


def test_task_loss_matches_closed_forms() -> None:
    z = torch.tensor([[-2.0], [0.5], [3.0]], dtype=torch.float64)
    y = torch.tensor([0, 1, 1])
    p = torch.sigmoid(z.squeeze(1))
    bce = -(y * p.log() + (1 - y) * (1 - p).log()).mean()
    assert torch.allclose(task_loss(z, y, 2), bce)
    logits = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 5.0]], dtype=torch.float64)
    yy = torch.tensor([1, 0])
    ce = -(logits.log_softmax(1)[torch.arange(2), yy]).mean()
    assert torch.allclose(task_loss(logits, yy, 3), ce)
    with pytest.raises(ValueError, match="single logit"):
        task_loss(z, y, 3)
    with pytest.raises(ValueError, match="model's 3 outputs"):
        task_loss(logits, yy, 4)


def test_predict_accuracy_evaluate() -> None:
    model = build_model("lr", (2,), 2, seed=0)
    set_flat(model, torch.tensor([1.0, 0.0, -0.5]))  # logit = x0 - 0.5
    x = torch.tensor([[0.0, 9.0], [1.0, 0.0], [2.0, 0.0], [0.2, 0.0]])
    y = torch.tensor([0, 1, 0, 0])
    assert predict(model, x).tolist() == [0, 1, 1, 0]
    assert accuracy(model, x, y) == 0.75
    res = evaluate(model, x, y, num_classes=2)
    assert res["accuracy"] == 0.75
    assert res["loss"] == pytest.approx(float(F.binary_cross_entropy_with_logits(x[:, 0] - 0.5, y.float())), rel=1e-6)
    flat = torch.tensor([-1.0, 0.0, 0.5])
    assert predict(model, x, params=flat).tolist() == [1, 0, 0, 1]
    assert evaluate(model, x, y, num_classes=2, params=flat)["accuracy"] == 0.25


def test_cnn_thesis_refuses_images_below_16_pixels_naming_the_padded_cnn() -> None:
    with pytest.raises(ValueError, match="height and width >= 16 for the cnn-thesis.*model = 'cnn'"):
        build_model("cnn-thesis", (1, 8, 8), 10, seed=0)
