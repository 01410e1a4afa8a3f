"""The ``backdoor`` attack (docs/attacks.md §3): the keyed poisoned examples, the trigger, the success rate, refusals.

The honest clients' uploads are checked bit for bit against the run without the attack in
``tests/attacks/test_attacks.py`` (``backdoor`` is one of its attacks), the runtimes against each
other in ``tests/simulations/test_batched_engine.py`` and ``tests/simulations/test_engines.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedpriv.attacks.backdoor import (
    BACKDOOR_ROWS,
    attack_success_rate,
    backdoor_data,
    stamp_trigger,
    triggered_test_set,
)
from fedpriv.attacks.selection import attackers
from fedpriv.config import RunConfig
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import local_update
from fedpriv.rng import stream
from fedpriv.workloads.registry import get_workload
from tests.attacks.test_attacks import BASE, _uploads

ATTACK = {"attack": "backdoor", "attack-fraction": 0.3, "backdoor-target": 7, "backdoor-fraction": 0.4}


def _expected(x: torch.Tensor, y: torch.Tensor, client: int, fraction: float, target: int) -> tuple:
    """The attacker's poisoned data built directly: its ⌊f·n⌋ smallest keyed uniforms, bottom-right 2×2 at 1."""
    n = x.shape[0]
    rows = np.argsort(stream(3, 0, client, BACKDOOR_ROWS).random(n))[:math.floor(fraction * n)]
    x_exp, y_exp = x.clone(), y.clone()
    x_exp[rows, :, 6:8, 6:8] = 1.0
    y_exp[rows] = target
    return x_exp, y_exp, rows


def test_the_poisoned_examples_are_the_keyed_ones_with_trigger_and_target() -> None:
    """Per client (its own partition) and once for all attackers (the batched engine): the same examples, bit for bit."""
    workload = get_workload("ldp-sgd")
    setup = workload.setup(RunConfig.from_mapping({**BASE, **ATTACK}))
    cfg = setup.config
    data = workload.load_clients(setup)
    pooled = data.source  # the digits split over the clients: one array, index arrays per client
    all_x, all_y = torch.from_numpy(np.array(pooled.train.x)), torch.from_numpy(np.array(pooled.train.y))
    bad = attackers(3, 10, 0.3)
    whole_x, whole_y = backdoor_data(cfg, all_x, all_y, bad, [pooled.parts[c] for c in bad])
    poisoned = 0
    for c in range(10):
        own = data[c]
        x, y = backdoor_data(cfg, own.x, own.y, [c], [np.arange(own.x.shape[0])])
        if c in bad:
            x_exp, y_exp, rows = _expected(own.x, own.y, c, 0.4, 7)
            assert rows.size == math.floor(0.4 * own.x.shape[0]) > 0
            poisoned += rows.size
            assert torch.equal(x, x_exp) and torch.equal(y, y_exp)
            assert bool((own.x[rows, :, 6:8, 6:8] < 1).any())  # the trigger changed the inputs
        else:
            assert x is own.x and y is own.y  # an honest client's data: untouched
        idx = torch.from_numpy(pooled.parts[c])
        assert torch.equal(whole_x[idx], x) and torch.equal(whole_y[idx], y)
    assert int((whole_y != all_y).sum()) <= poisoned and int((whole_x != all_x).any(dim=(1, 2, 3)).sum()) == poisoned


def test_the_attackers_upload_is_training_on_its_poisoned_data() -> None:
    """Without noise, an attacker's upload is local training on the directly built poisoned data."""
    overrides = {**ATTACK, "perturbation": "none"}
    w, attacked = _uploads(overrides, "fast")
    workload = get_workload("ldp-sgd")
    setup = workload.setup(RunConfig.from_mapping({**BASE, **overrides}))
    c = int(attackers(3, 10, 0.3)[0])
    own = workload.load_clients(setup)[c]
    x_exp, y_exp, _ = _expected(own.x, own.y, c, 0.4, 7)
    res = local_update(own.model, torch.from_numpy(w), x_exp, y_exp, LdpSgdConfig.of(setup.config),
                       server_round=2, client_id=c, num_classes=10)
    np.testing.assert_array_equal(attacked[c], (res.release.base + res.release.scale * res.release.vector).numpy())


class _PixelRule(nn.Module):
    """Logits that pick class 7 when pixel (row, col) of channel 0 is above 1/2, else class 0."""

    def __init__(self, row: int, col: int) -> None:
        super().__init__()
        self.row, self.col = row, col
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(x.shape[0], 10)
        logits[:, 7] = x[:, 0, self.row, self.col] - 0.5
        return logits + 0 * self.dummy


def test_attack_success_rate_on_a_hand_built_model_and_test_set() -> None:
    """ASR counts the non-target test inputs that the model calls the target once the trigger is stamped."""
    x = torch.zeros(10, 1, 8, 8)
    y = torch.tensor([7, 7, 7, 0, 1, 2, 3, 4, 5, 6])  # three inputs of the target class: not counted
    x[[0, 3, 4], 0, 0, 0] = 1.0  # the top-left pixel lit on one target and two non-target inputs
    triggered = triggered_test_set(x, y, target=7, side=2)
    assert triggered.shape == (7, 1, 8, 8) and bool((triggered[:, :, 6:, 6:] == 1).all())
    assert torch.equal(triggered[:, :, :6, :], x[3:, :, :6, :])  # nothing else changed
    # a model keyed on the top-left pixel ignores the trigger: 2 of the 7 non-target inputs go to class 7
    assert attack_success_rate(_PixelRule(0, 0), triggered, target=7, num_classes=10) == pytest.approx(2 / 7)
    # a model keyed on the trigger's corner: every triggered input goes to 7, none of the clean ones
    assert attack_success_rate(_PixelRule(7, 7), triggered, target=7, num_classes=10) == 1.0
    assert attack_success_rate(_PixelRule(7, 7), x[3:], target=7, num_classes=10) == 0.0
    assert math.isnan(attack_success_rate(_PixelRule(7, 7), x[:0], target=7, num_classes=10))


def test_the_trigger_covers_every_channel_of_the_corner() -> None:
    x = torch.rand(2, 3, 32, 32) * 0.5
    out = stamp_trigger(x, 4)
    assert bool((out[..., 28:, 28:] == 1).all()) and torch.equal(out[..., :28, :], x[..., :28, :])
    assert torch.equal(out[..., :, :28], x[..., :, :28]) and not bool((x == 1).any())  # the input is not written
    with pytest.raises(ValueError, match="x must hold images"):
        stamp_trigger(torch.zeros(3, 64), 2)


@pytest.mark.parametrize("overrides, match", [
    ({"dataset": "synthetic"}, "attack 'backdoor' needs an image dataset.*dataset must be one of 'digits', 'mnist', "
                               "'cifar10', got 'synthetic'"),
    ({"backdoor-target": 10}, r"backdoor-target must be a class id in \[0, 9\]"),
    ({"backdoor-target": 2, "labels": "low_vs_high"}, r"backdoor-target must be a class id in \[0, 1\]"),
    ({"backdoor-target": -1}, "backdoor-target must be >= 0"),
    ({"backdoor-fraction": 0.0}, r"backdoor-fraction must be in \(0, 1\]"),
    ({"backdoor-fraction": 1.5}, r"backdoor-fraction must be in \(0, 1\]"),
    ({"attack": "sign-flip", "backdoor-target": 3}, "backdoor-target applies to attack 'backdoor'"),
])
def test_bad_backdoor_values_are_refused(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_workload("ldp-sgd").setup(RunConfig.from_mapping({**BASE, **ATTACK, **overrides}))


def test_the_backdoor_works_without_noise(tmp_path) -> None:
    """6 of 20 clients (iid digits, no noise, 3 rounds) plant the trigger: ASR high, clean accuracy kept.

    A model that called every input the target would also have ASR 1, so both runs must first have
    learned (test accuracy >= 0.7 on digits' balanced test set; all-target gives about 0.1). The
    clean run's ASR is then at most its error on triggered inputs (measured 0.002 with seed 0), the
    attacked run's measured 0.89: the thresholds 0.1 and 0.5 leave wide margins on both sides.
    """
    from simulations.runner import run

    base = {"num-clients": 20, "rounds": 3, "partition": "iid", "perturbation": "none", "local-steps": 5,
            "batch-size": 16, "lr": 1.0, "seed": 0, "attack-fraction": 0.3}
    clean = run(RunConfig.from_mapping(base), engine="batched", root=tmp_path / "clean")
    attacked = run(RunConfig.from_mapping({**base, "attack": "backdoor"}), engine="batched", root=tmp_path / "bd")
    assert clean.rounds[-1]["test-accuracy"] >= 0.7 and attacked.rounds[-1]["test-accuracy"] >= 0.7
    assert clean.rounds[-1]["backdoor-asr"] <= 0.1
    assert attacked.rounds[-1]["backdoor-asr"] >= 0.5
    assert attacked.summary["final"]["backdoor-asr"] == attacked.rounds[-1]["backdoor-asr"]
    assert attacked.summary["attack"]["backdoor-target"] == 0 and attacked.summary["attack"]["backdoor-fraction"] == 0.5
