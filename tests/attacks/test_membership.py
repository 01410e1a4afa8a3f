"""Membership inference (docs/attacks.md §9): the loss-threshold attack finds a memorizing model's members, is a
coin flip where scores carry no membership signal, and ``membership-attack`` is checked and reported by ldp-sgd."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpriv.attacks.membership import loss_threshold_attack, membership_scores
from fedpriv.config import RunConfig
from fedpriv.models import build_model, get_flat
from fedpriv.rng import stream, torch_stream
from fedpriv.workloads.ldp_sgd.report import row
from fedpriv.workloads.report import CellRun
from simulations.runner import run


def _data(n: int, purpose: str) -> tuple[torch.Tensor, torch.Tensor]:
    """n examples of 16 standard normal features with labels drawn independently of them (10 classes)."""
    g = torch_stream(0, 0, 0, purpose)
    return torch.randn(n, 16, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_a_memorizing_model_gives_its_members_away() -> None:
    # 30 examples with random labels, 100 full-batch epochs without noise: the MLP learns them by heart, so its
    # loss on them is far below its loss on fresh examples of the same distribution
    members, non_members = _data(30, "members"), _data(300, "non-members")
    model = build_model("mlp", (16,), 10, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(100):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(members[0]), members[1]).backward()
        opt.step()
    result = loss_threshold_attack(model, get_flat(model).detach(), members, non_members, num_classes=10)
    assert (result.members, result.non_members) == (30, 300)
    # a coin flip would be 0.5 ± null_se = 0.055; 0.9 is more than 7 of those above
    assert result.auc > 0.9 and result.advantage > 0.7


def test_scores_independent_of_membership_give_an_auc_within_the_clt_band_of_one_half() -> None:
    # Mann–Whitney under the null: AUC = 0.5 ± √((m+n+1)/(12mn)); 3 of those is a 0.27% two-sided band
    rng = stream(0, 0, 0, "mia-null")
    scores = rng.standard_normal(3000)
    result = membership_scores(scores[:1000], scores[1000:])
    assert result.null_se == pytest.approx(np.sqrt(3001 / (12 * 1000 * 2000)))
    assert abs(result.auc - 0.5) <= 3 * result.null_se
    assert 0.0 <= result.advantage <= 1.0


def test_an_untrained_model_on_one_distribution_is_a_coin_flip() -> None:
    # members and non-members from the same distribution, a model that never saw either: no signal
    members, non_members = _data(500, "members"), _data(500, "non-members")
    model = build_model("mlp", (16,), 10, seed=0)
    result = loss_threshold_attack(model, get_flat(model).detach(), members, non_members, num_classes=10)
    assert abs(result.auc - 0.5) <= 3 * result.null_se


def test_scores_must_be_finite_and_non_empty() -> None:
    with pytest.raises(ValueError, match="member_scores must hold at least one score"):
        membership_scores(np.zeros(0), np.zeros(3))
    with pytest.raises(ValueError, match="non_member_scores must be finite"):
        membership_scores(np.zeros(3), np.array([0.0, np.nan]))


def test_a_bad_membership_attack_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match="membership-attack"):
        RunConfig.from_mapping({"membership-attack": "shadow"})


def test_ldp_sgd_reports_the_attack_in_its_summary_and_row(tmp_path: Path) -> None:
    base = {"dataset": "digits", "num-clients": 4, "rounds": 1, "local-steps": 2, "perturbation": "none", "seed": 0}
    config = RunConfig.from_mapping({**base, "membership-attack": "loss-threshold"})
    attacked = run(config, root=tmp_path)
    membership = attacked.summary["membership"]
    assert membership["attack"] == "loss-threshold"
    assert membership["members"] + membership["non_members"] == 1797  # digits: every training example, the test set
    assert 0.0 <= membership["auc"] <= 1.0 and 0.0 <= membership["advantage"] <= 1.0
    cell = row(CellRun("x", config, attacked.rounds, attacked.summary, attacked.directory))
    assert cell["mia_auc"] == membership["auc"] and cell["mia_advantage"] == membership["advantage"]
    config = RunConfig.from_mapping(base)
    plain = run(config, root=tmp_path)
    assert plain.summary["membership"] == {"attack": "none"}
    cell = row(CellRun("y", config, plain.rounds, plain.summary, plain.directory))
    assert cell["mia_auc"] is None and cell["mia_advantage"] is None
