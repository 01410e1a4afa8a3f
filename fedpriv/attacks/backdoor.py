"""The ``backdoor`` attack on federated LDP-SGD: a pixel trigger on a share of each attacker's examples (docs/attacks.md §3).

Data poisoning, like ``label-flip``: an attacker stamps the trigger — a square of max-intensity pixels
(1.0; every image set holds pixels in [0, 1]) in the bottom-right corner of every channel, of side
:data:`TRIGGER_SIDE` — on ⌊``backdoor-fraction`` · n_k⌋ of its n_k examples, relabels them
``backdoor-target``, trains on the result and privatizes through its mechanism as an honest client
does: the attack acts *before* the mechanism.

Which examples: client k's poisoned positions are the ⌊f · n_k⌋ smallest of n_k uniforms drawn from
``stream(seed, 0, k, "backdoor-rows")`` (:mod:`fedpriv.rng`), fixed for the run, so a ClientApp that
holds its partition and the batched engine that holds every partition poison the same examples.
:func:`poisoned_examples` draws them for clients of equal size at once (one :class:`RowStreams`
draw and one argsort per distinct size, as the minibatches are drawn).

The metric is the attack success rate (:func:`attack_success_rate`): the share of the test inputs whose
label is not the target that the model classifies as the target once the trigger is stamped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedpriv.attacks.keys import AttackSettings
from fedpriv.attacks.selection import is_attacker
from fedpriv.models import evaluate
from fedpriv.rng import RowStreams

__all__ = ["BACKDOOR_ROWS", "IMAGE_CLASSES", "TRIGGER_SIDE", "attack_success_rate", "backdoor_data",
           "check_backdoor", "poisoned_examples", "stamp_trigger", "triggered_test_set"]

#: Purpose of the keyed stream of the examples a backdoor attacker poisons.
BACKDOOR_ROWS = "backdoor-rows"
#: Side of the square trigger per image dataset (inputs ``(channels, height, width)``): digits 8×8 → 2×2,
#: MNIST 28×28 and CIFAR-10 32×32 → 4×4 (about 2 % of the pixels of the large sets, 6 % of digits').
TRIGGER_SIDE: dict[str, int] = {"digits": 2, "mnist": 4, "cifar10": 4}
#: Classes of the image datasets (all three are 10-class; ``labels = "low_vs_high"`` makes 2).
IMAGE_CLASSES = 10
#: Slack of the floor of fraction · n (as for the attackers' count).
_FLOOR_SLACK = 1e-9


def check_backdoor(config: AttackSettings) -> None:
    """Refuse a dataset without a trigger (not an image set) and a target outside the task's classes."""
    dataset = str(config["dataset"])
    if dataset not in TRIGGER_SIDE:
        raise ValueError(f"attack 'backdoor' needs an image dataset for its pixel trigger: dataset must be one of "
                         f"{', '.join(map(repr, TRIGGER_SIDE))}, got {dataset!r}")
    classes = 2 if config["labels"] == "low_vs_high" else IMAGE_CLASSES
    target = config["backdoor-target"]
    if not 0 <= target < classes:
        raise ValueError(f"backdoor-target must be a class id in [0, {classes - 1}] ({dataset}, labels="
                         f"{config['labels']!r}), got {target!r}")


def stamp_trigger(x: Tensor, side: int) -> Tensor:
    """A copy of the images ``x`` (…, channels, height, width) with the trigger: the bottom-right side × side square at 1."""
    if x.ndim < 3 or x.shape[-1] < side or x.shape[-2] < side:
        raise ValueError(f"x must hold images (..., channels, height, width) of at least {side}×{side} pixels, got "
                         f"shape {tuple(x.shape)}")
    out = x.clone()
    out[..., -side:, -side:] = 1.0
    return out


def poisoned_examples(config: AttackSettings, clients: Any, parts: Sequence[np.ndarray]) -> np.ndarray:
    """Indices (ascending) of the examples the backdoor attackers among ``clients`` poison; ``parts[i]`` indexes
    client ``clients[i]``'s examples (module docstring). Empty unless ``attack = "backdoor"``."""
    ids = np.asarray(clients, dtype=np.int64).reshape(-1)
    if config["attack"] != "backdoor" or ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    if len(parts) != ids.size:
        raise ValueError(f"parts must have one index array per client ({ids.size}), got {len(parts)}")
    sizes = np.fromiter((np.size(p) for p in parts), dtype=np.int64, count=ids.size)
    attacking = is_attacker(config, ids)
    fraction = float(config["backdoor-fraction"])
    out = []
    for n in np.unique(sizes[attacking]):  # one draw and one argsort per distinct client size
        k = math.floor(fraction * int(n) + _FLOOR_SLACK)
        if k == 0:
            continue
        rows = np.flatnonzero(attacking & (sizes == n))
        draws = RowStreams.keyed(config["seed"], 0, ids[rows].tolist(), BACKDOOR_ROWS).random((rows.size, int(n)))
        local = np.argsort(draws, axis=1, kind="stable")[:, :k]
        own = np.stack([np.asarray(parts[int(r)], dtype=np.int64) for r in rows])
        out.append(np.take_along_axis(own, local, axis=1).reshape(-1))
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def backdoor_data(config: AttackSettings, x: Tensor, y: Tensor, clients: Any,
                  parts: Sequence[np.ndarray]) -> tuple[Tensor, Tensor]:
    """``(x, y)`` with the backdoor attackers' poisoned examples (:func:`poisoned_examples`) stamped and relabelled;
    the inputs themselves when nothing is poisoned."""
    rows = poisoned_examples(config, clients, parts)
    if rows.size == 0:
        return x, y
    sel = torch.from_numpy(rows)
    x, y = x.clone(), y.clone()
    x[sel] = stamp_trigger(x[sel], TRIGGER_SIDE[str(config["dataset"])])
    y[sel] = int(config["backdoor-target"])
    return x, y


def triggered_test_set(x: Tensor, y: Tensor, *, target: int, side: int) -> Tensor:
    """The test inputs whose label is not ``target``, with the trigger stamped (what the success rate is measured on)."""
    return stamp_trigger(x[y != target], side)


def attack_success_rate(model: nn.Module, x_triggered: Tensor, *, target: int, num_classes: int,
                        params: Any = None) -> float:
    """Share of ``x_triggered`` classified as ``target`` (:func:`fedpriv.models.evaluate`'s accuracy against the
    target label); nan without inputs."""
    if x_triggered.shape[0] == 0:
        return math.nan
    labels = torch.full((x_triggered.shape[0],), int(target), dtype=torch.int64)
    return evaluate(model, x_triggered, labels, num_classes=num_classes, params=params)["accuracy"]
