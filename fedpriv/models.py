"""The thesis models (LR, MLP, CNN, the GeoDP CNN) as torch modules, and flat-parameter helpers.

Models (docs/federated_ldp_sgd.md, "Experiment settings"; all float32):

* ``"lr"`` — logistic regression on the flattened input. With ``num_classes == 2`` it is
  ``Linear(in, 1)`` with one binary logit and binary cross-entropy, the case study's model: on
  MNIST's 0–4 vs 5–9 task d = 784 + 1 = 785. Otherwise ``Linear(in, num_classes)`` (multinomial,
  cross-entropy).
* ``"mlp"`` — flatten → ``Linear(in, 200)`` → tanh → ``Linear(200, num_classes)``; on CIFAR-10
  d = (3072+1)·200 + (200+1)·10 = 616,610.
* ``"cnn"`` — ``Conv(c→10, 5×5, pad 2)`` → ReLU → max-pool 2 → ``Conv(10→20, 5×5, pad 2)`` → ReLU
  → max-pool 2 → flatten → ``Linear(20·⌊H/4⌋·⌊W/4⌋, 50)`` → ReLU → ``Linear(50, num_classes)``;
  on CIFAR-10 d = 760 + 5,020 + 64,050 + 510 = 70,340 (the spec's corrected count; the source
  prints 70,540, Ambiguity 11).
* ``"cnn-thesis"`` — the "2-layer CNN" of the GeoDP experiments (docs/geodp.md, "CNN on MNIST", thesis
  Table 5.2): ``Conv(c→10, 5×5)`` → max-pool 2 → ReLU → ``Conv(10→20, 5×5)`` → max-pool 2 → ReLU → flatten
  → ``Linear(20·h'·w', 50)`` → ReLU → ``Linear(50, num_classes)``, no padding, h' = ⌊(⌊(H−4)/2⌋ − 4)/2⌋;
  on 1×28×28 MNIST d = 260 + 5,020 + 16,050 + 510 = 21,840, the thesis's count. The source's script
  also has a dropout after the first linear layer; it has no parameters and is left out (it would draw
  from a random state inside per-sample ``vmap``), so the count is unchanged. Needs H, W ≥ 16.

Your own model: ``name = "package.module:factory"`` names a callable that returns an ``nn.Module``
(see :func:`load_factory_model`). It is called with ``(input_shape, num_classes)`` when it takes
parameters, with none otherwise (a Flower quickstart's ``Net``), inside ``torch.random.fork_rng``
seeded from the keyed stream ``torch_stream(seed, 0, SERVER, "init")``: the factory's own
initialization is kept, is the same in every process, and leaves torch's global random state as
it was.

Initialization of the thesis models is PyTorch's default law (U(−1/√fan_in, 1/√fan_in) for every weight and bias), drawn
from the keyed stream ``torch_stream(seed, 0, SERVER, "init")`` in registration order, weight before
bias. The modules are built on the meta device first, so no global random state is read or
advanced (docs/design.md §4).

Flat parameters: :func:`get_flat` concatenates the parameters in registration order (for a
``Linear`` the weight row-major, then the bias: the bias is **last**, torch order, Ambiguity 9).
:func:`forward_flat` evaluates the model at a flat parameter vector without touching the module's
own parameters (``torch.func.functional_call``), which is what local training and evaluation use.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedpriv._validation import check_choice, check_int
from fedpriv.model_names import MODEL_NAMES, is_factory_spec
from fedpriv.rng import SERVER, torch_stream

__all__ = [
    "MODEL_NAMES",
    "accuracy",
    "build_model",
    "load_factory",
    "load_factory_model",
    "evaluate",
    "forward_flat",
    "get_flat",
    "num_params",
    "predict",
    "set_flat",
    "task_loss",
    "unflatten",
]

_DTYPE = torch.float32
_INIT_PURPOSE = "init"


class _FedModel(nn.Module):
    """Common attributes of the thesis models (read by the input checks of local training)."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    num_outputs: int
    flattens_input: bool


class LogisticRegression(_FedModel):
    """``Linear(in, 1)`` (binary logit) for two classes, else ``Linear(in, num_classes)``."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, device: Any = None) -> None:
        super().__init__()
        self.name, self.input_shape, self.num_classes, self.flattens_input = "lr", input_shape, num_classes, True
        self.num_outputs = 1 if num_classes == 2 else num_classes
        self.linear = nn.Linear(math.prod(input_shape), self.num_outputs, device=device, dtype=_DTYPE)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x.flatten(1))


class MLP(_FedModel):
    """flatten → ``Linear(in, 200)`` → tanh → ``Linear(200, num_classes)``."""

    hidden = 200

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, device: Any = None) -> None:
        super().__init__()
        self.name, self.input_shape, self.num_classes, self.flattens_input = "mlp", input_shape, num_classes, True
        self.num_outputs = num_classes
        self.fc1 = nn.Linear(math.prod(input_shape), self.hidden, device=device, dtype=_DTYPE)
        self.fc2 = nn.Linear(self.hidden, num_classes, device=device, dtype=_DTYPE)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


class CNN(_FedModel):
    """Two 5×5 'same' convolutions (10, 20 channels), each with ReLU and 2×2 max-pooling, then 50 → classes."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, device: Any = None) -> None:
        super().__init__()
        self.name, self.input_shape, self.num_classes, self.flattens_input = "cnn", input_shape, num_classes, False
        self.num_outputs = num_classes
        c, h, w = input_shape
        self.conv1 = nn.Conv2d(c, 10, 5, padding=2, device=device, dtype=_DTYPE)
        self.conv2 = nn.Conv2d(10, 20, 5, padding=2, device=device, dtype=_DTYPE)
        self.fc1 = nn.Linear(20 * (h // 4) * (w // 4), 50, device=device, dtype=_DTYPE)
        self.fc2 = nn.Linear(50, num_classes, device=device, dtype=_DTYPE)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class ThesisCNN(_FedModel):
    """The GeoDP experiments' 2-layer CNN: two unpadded 5×5 convolutions (10, 20 channels), each with 2×2 max-pooling
    then ReLU, then 50 → classes (21,840 parameters on 1×28×28)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, device: Any = None) -> None:
        super().__init__()
        self.name, self.input_shape, self.num_classes, self.flattens_input = ("cnn-thesis", input_shape, num_classes,
                                                                              False)
        self.num_outputs = num_classes
        c, h, w = input_shape
        self.conv1 = nn.Conv2d(c, 10, 5, device=device, dtype=_DTYPE)
        self.conv2 = nn.Conv2d(10, 20, 5, device=device, dtype=_DTYPE)
        self.fc1 = nn.Linear(20 * ((((h - 4) // 2) - 4) // 2) * ((((w - 4) // 2) - 4) // 2), 50, device=device,
                             dtype=_DTYPE)
        self.fc2 = nn.Linear(50, num_classes, device=device, dtype=_DTYPE)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


_CLASSES: dict[str, type[_FedModel]] = {"lr": LogisticRegression, "mlp": MLP, "cnn": CNN, "cnn-thesis": ThesisCNN}


def _check_input_shape(name: str, input_shape: Any) -> tuple[int, ...]:
    if not isinstance(input_shape, Sequence) or isinstance(input_shape, str) or len(input_shape) == 0:
        raise ValueError(f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}")
    shape = tuple(check_int(s, "input_shape entries", minimum=1) for s in input_shape)
    if name == "cnn":
        if len(shape) != 3:
            raise ValueError(f"input_shape must be (channels, height, width) for the cnn, got {shape!r}")
        if shape[1] < 4 or shape[2] < 4:
            raise ValueError(
                f"input_shape must have height and width >= 4 for the cnn (two 2x2 max-poolings), got {shape!r}"
            )
    if name == "cnn-thesis" and (len(shape) != 3 or shape[1] < 16 or shape[2] < 16):
        raise ValueError(f"input_shape must be (channels, height, width) with height and width >= 16 for the "
                         f"cnn-thesis (two unpadded 5x5 convolutions, each with a 2x2 max-pooling), got {shape!r}; "
                         "use model = 'cnn' (padded) for smaller images")
    return shape


def load_factory(spec: str, key: str = "model") -> Any:
    """The callable ``spec = "package.module:factory"`` names; an import failure raises one error naming ``key``."""
    if not isinstance(spec, str) or not is_factory_spec(spec):
        raise ValueError(f"{key} must be one of {', '.join(map(repr, MODEL_NAMES))} or 'package.module:factory' "
                         f"(a callable returning a torch.nn.Module), got {spec!r}")
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{key} = {spec!r}: cannot import module {module_name!r} ({exc}); make it importable "
                         f"(installed, or on PYTHONPATH in every process that runs clients)") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{key} = {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{key} = {spec!r}: {attr!r} must be a callable returning a torch.nn.Module, "
                         f"got {type(obj).__name__}")
    return obj


def _takes_arguments(factory: Any) -> bool:
    try:
        return bool(inspect.signature(factory).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: give it the arguments
        return True


def load_factory_model(spec: str, input_shape: tuple[int, ...], num_classes: int, *, seed: int,
                       key: str = "model") -> nn.Module:
    """Call the factory ``spec`` names and check what it returns: a float32 ``nn.Module`` with the right outputs.

    The factory gets ``(input_shape, num_classes)`` when it takes parameters. Its module must have
    parameters (all float32, on the CPU), no buffers, and map a batch of shape ``(n, *input_shape)`` to logits of
    shape ``(n, num_classes)`` (or ``(n, 1)``, one binary logit, when ``num_classes == 2``); else one
    ``ValueError`` naming ``key``.
    """
    factory = load_factory(spec, key)
    gen = torch_stream(seed, 0, SERVER, _INIT_PURPOSE)
    with torch.random.fork_rng(devices=[]):  # the factory's own init, keyed; the global state restored after
        torch.manual_seed(gen.initial_seed())
        try:
            model = factory(tuple(input_shape), num_classes) if _takes_arguments(factory) else factory()
        except Exception as exc:
            raise ValueError(f"{key} = {spec!r}: calling the factory failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ValueError(f"{key} = {spec!r} must return a torch.nn.Module, got {type(model).__name__}")
    params = list(model.parameters())
    if not params:
        raise ValueError(f"{key} = {spec!r} returned a module without parameters; there is nothing to train")
    buffers = [name for name, _ in model.named_buffers()]
    if buffers:
        raise ValueError(f"{key} = {spec!r} must return a module without buffers (state outside its parameters, "
                         f"e.g. BatchNorm's running statistics, is not federated), got buffers {buffers[:3]}")
    bad = sorted({str(p.dtype) for p in params if p.dtype != _DTYPE} | {str(p.device) for p in params
                                                                       if p.device.type != "cpu"})
    if bad:
        raise ValueError(f"{key} = {spec!r} must return a float32 module on the CPU, got parameters with {bad}")
    try:
        with torch.no_grad():
            out = model(torch.zeros((2, *input_shape), dtype=_DTYPE))
    except Exception as exc:
        raise ValueError(f"{key} = {spec!r}: the module must accept a batch of shape (n, {', '.join(map(str, input_shape))}) "
                         f"(the dataset's examples), got {type(exc).__name__}: {exc}") from exc
    widths = (num_classes, 1) if num_classes == 2 else (num_classes,)
    if not isinstance(out, Tensor) or out.ndim != 2 or out.shape[1] not in widths:
        got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(f"{key} = {spec!r} must map a batch to logits of shape (n, {num_classes})"
                         f"{' or (n, 1)' if num_classes == 2 else ''} for the dataset's {num_classes} classes, "
                         f"got {got}")
    return model


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, *, seed: int) -> nn.Module:
    """Build model ``name`` ("lr", "mlp", "cnn", "cnn-thesis", or a factory) for inputs of ``input_shape``, keyed initialization.

    Parameters
    ----------
    name : {"lr", "mlp", "cnn", "cnn-thesis"} or "package.module:factory"
        A factory is called as :func:`load_factory_model` says.
    input_shape : tuple of int
        Shape of one example, without the batch dimension (``(channels, height, width)`` for the cnn,
        any shape for lr and mlp, which flatten it).
    num_classes : int >= 2
        Number of labels; ``"lr"`` with 2 classes has a single binary logit.
    seed : int >= 0
        Run seed; the initial parameters are drawn from ``torch_stream(seed, 0, SERVER, "init")``.

    Returns
    -------
    torch.nn.Module
        float32 on the CPU, with attributes ``name``, ``input_shape``, ``num_classes``,
        ``num_outputs``.

    Examples
    --------
    >>> from fedpriv.models import build_model, num_params
    >>> num_params(build_model("lr", (1, 28, 28), 2, seed=0))
    785
    """
    if isinstance(name, str) and is_factory_spec(name):
        shape = tuple(check_int(s, "input_shape entries", minimum=1) for s in input_shape)
        return load_factory_model(name, shape, check_int(num_classes, "num_classes", minimum=2),
                                  seed=check_int(seed, "seed", minimum=0))
    check_choice(name, "name", MODEL_NAMES)
    shape = _check_input_shape(name, input_shape)
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    seed = check_int(seed, "seed", minimum=0)
    model = _CLASSES[name](shape, num_classes, device="meta")  # meta: no draw from torch's global RNG
    model = model.to_empty(device="cpu")
    gen = torch_stream(seed, 0, SERVER, _INIT_PURPOSE)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                fan_in = module.weight[0].numel()  # in_features, or in_channels·kh·kw
                bound = 1.0 / math.sqrt(fan_in)
                module.weight.uniform_(-bound, bound, generator=gen)
                if module.bias is not None:  # a layer built with bias=False has none
                    module.bias.uniform_(-bound, bound, generator=gen)
    return model


# ---------------------------------------------------------------------------------- flat parameters

def num_params(model: nn.Module) -> int:
    """Number of scalar parameters d."""
    return sum(p.numel() for p in model.parameters())


def get_flat(model: nn.Module) -> Tensor:
    """All parameters as one 1-D float32 tensor (a copy), in registration order."""
    return torch.cat([p.detach().reshape(-1).to(_DTYPE) for p in model.parameters()])


def _check_flat(model: nn.Module, flat: Any, name: str = "flat") -> Tensor:
    if not isinstance(flat, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(flat).__name__}")
    d = num_params(model)
    if flat.ndim != 1 or flat.numel() != d:
        raise ValueError(f"{name} must be a 1-D tensor of {d} parameters for this model, got shape {tuple(flat.shape)}")
    if not flat.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {flat.dtype}")
    return flat


def set_flat(model: nn.Module, flat: Tensor) -> None:
    """Copy the 1-D vector ``flat`` into the model's parameters (inverse of :func:`get_flat`)."""
    flat = _check_flat(model, flat)
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p))
            offset += n


def unflatten(model: nn.Module, flat: Tensor) -> dict[str, Tensor]:
    """Views of ``flat`` shaped like the model's parameters, keyed by name (for ``functional_call``).

    Gradients flow from the views back to ``flat``; the shape is checked by the caller
    (:func:`forward_flat` or local training).
    """
    out: dict[str, Tensor] = {}
    offset = 0
    for name, p in model.named_parameters():
        n = p.numel()
        out[name] = flat[offset:offset + n].view(p.shape)
        offset += n
    return out


def forward_flat(model: nn.Module, flat: Tensor, x: Tensor) -> Tensor:
    """Logits of ``model`` at parameters ``flat`` on the batch ``x``; the module is not modified."""
    flat = _check_flat(model, flat)
    return torch.func.functional_call(model, unflatten(model, flat), (x,))


# ---------------------------------------------------------------------------------- loss and metrics

def task_loss(logits: Tensor, y: Tensor, num_classes: int, *, reduction: str = "mean") -> Tensor:
    """Loss of a batch: BCE-with-logits for a single binary logit, cross-entropy otherwise.

    ``logits`` has shape (n, 1) with ``num_classes == 2`` (the binary LR) or (n, num_classes);
    ``y`` holds integer labels of shape (n,). ``reduction`` is ``"mean"`` (a scalar) or ``"none"``
    (the n per-example losses, used by the batched engine's masked minibatches).
    """
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    width = logits.shape[-1]
    if width == 1:
        if num_classes != 2:
            raise ValueError(f"num_classes must be 2 for a model with a single logit, got {num_classes!r}")
        return F.binary_cross_entropy_with_logits(logits.squeeze(-1), y.to(logits.dtype), reduction=reduction)
    if width != num_classes:
        raise ValueError(f"num_classes must equal the model's {width} outputs, got {num_classes!r}")
    return F.cross_entropy(logits, y, reduction=reduction)


def _labels(logits: Tensor) -> Tensor:
    if logits.shape[-1] == 1:
        return (logits.squeeze(-1) > 0).to(torch.int64)
    return logits.argmax(dim=-1)


def predict(model: nn.Module, x: Tensor, *, params: Tensor | None = None) -> Tensor:
    """Predicted labels (int64, shape (n,)), at the model's own parameters or at flat ``params``."""
    with torch.no_grad():
        logits = model(x) if params is None else forward_flat(model, params, x)
    return _labels(logits)


def accuracy(model: nn.Module, x: Tensor, y: Tensor, *, params: Tensor | None = None) -> float:
    """Share of correctly predicted labels."""
    if y.numel() == 0:
        raise ValueError("y must hold at least one label to compute an accuracy")
    return float((predict(model, x, params=params) == y).to(torch.float64).mean())


#: Examples per forward pass when evaluating (bounds memory on large test sets).
EVAL_BATCH_SIZE = 8192


def evaluate(
    model: nn.Module, x: Tensor, y: Tensor, *, num_classes: int, params: Tensor | None = None,
    batch_size: int = EVAL_BATCH_SIZE,
) -> dict[str, float]:
    """``{"loss": mean task loss, "accuracy": ...}`` of the model (or of flat ``params``) on (x, y).

    Evaluated in chunks of ``batch_size`` examples whose mean loss and accuracy are combined weighted
    by chunk size; every runtime calls this one function, so they report the same numbers.
    """
    n = int(y.numel())
    if n == 0:
        raise ValueError("y must hold at least one label to evaluate a model")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    loss_sum = acc_sum = 0.0
    with torch.no_grad():
        for start in range(0, n, batch_size):
            stop = min(n, start + batch_size)
            xb, yb = x[start:stop], y[start:stop]
            logits = model(xb) if params is None else forward_flat(model, params, xb)
            loss = task_loss(logits, yb, num_classes)
            acc = (_labels(logits) == yb).to(torch.float64).mean()
            loss_sum += float(loss) * (stop - start) / n
            acc_sum += float(acc) * (stop - start) / n
    return {"loss": float(loss_sum), "accuracy": float(acc_sum)}
