"""Membership inference against a trained model: the loss-threshold attack (docs/attacks.md §9).

Yeom, Giacomelli, Fredrikson and Jha, "Privacy Risk in Machine Learning: Analyzing the Connection
to Overfitting" (CSF 2018): an example whose loss under the model is low is guessed to be a
training member. The attacker's score is the negative per-example loss; over the members (the
examples the model was trained on) and the non-members (held-out examples of the same
distribution) we report the attack's ROC AUC (0.5: no better than guessing) and its membership
advantage max over thresholds of TPR − FPR (Yeom et al. Definition 4, at the best threshold: an
upper bound on what a threshold chosen without the labels achieves). A model trained with
(ε, δ)-DP bounds the advantage by e^ε − 1 + δ-terms (Yeom et al. Theorem 1); a memorizing model
shows a large one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedpriv.attacks.keys import MEMBERSHIP_ATTACKS
from fedpriv.models import EVAL_BATCH_SIZE, forward_flat, task_loss

__all__ = ["MEMBERSHIP_ATTACKS", "MembershipResult", "loss_threshold_attack", "membership_scores", "per_example_loss"]

@dataclass(frozen=True)
class MembershipResult:
    """An attack's ROC AUC and membership advantage over ``members`` and ``non_members`` examples."""

    auc: float
    advantage: float
    members: int
    non_members: int

    @property
    def null_se(self) -> float:
        """The standard deviation of the AUC when scores carry no membership signal: √((m + n + 1)/(12 m n)).

        The AUC is the Mann–Whitney U statistic over m·n; under exchangeable scores (no ties)
        Var U = m n (m + n + 1)/12 (Mann and Whitney 1947), so the AUC is 0.5 ± this, by the CLT.
        """
        m, n = self.members, self.non_members
        return ((m + n + 1) / (12 * m * n)) ** 0.5


def membership_scores(member_scores: np.ndarray, non_member_scores: np.ndarray) -> MembershipResult:
    """AUC and advantage (max TPR − FPR) of scores where higher means "member"; both sets must be non-empty, finite."""
    from sklearn.metrics import roc_auc_score, roc_curve

    m = np.asarray(member_scores, dtype=np.float64).reshape(-1)
    n = np.asarray(non_member_scores, dtype=np.float64).reshape(-1)
    for name, s in (("member_scores", m), ("non_member_scores", n)):
        if s.size == 0:
            raise ValueError(f"{name} must hold at least one score")
        if not np.isfinite(s).all():
            raise ValueError(f"{name} must be finite, got {int((~np.isfinite(s)).sum())} NaN/inf value(s)")
    labels = np.concatenate([np.ones(m.size), np.zeros(n.size)])
    scores = np.concatenate([m, n])
    fpr, tpr, _ = roc_curve(labels, scores)
    return MembershipResult(auc=float(roc_auc_score(labels, scores)), advantage=float(np.max(tpr - fpr)),
                            members=int(m.size), non_members=int(n.size))


def per_example_loss(model: torch.nn.Module, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *,
                     num_classes: int, batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
    """The task loss of each example (n,) under flat ``params``, float64, in chunks of ``batch_size``."""
    out = np.empty(int(y.numel()), dtype=np.float64)
    with torch.no_grad():
        for start in range(0, out.size, batch_size):  # memory blocking over examples
            stop = min(out.size, start + batch_size)
            logits = forward_flat(model, params, x[start:stop])
            out[start:stop] = task_loss(logits, y[start:stop], num_classes, reduction="none").double().numpy()
    return out


def loss_threshold_attack(model: torch.nn.Module, params: torch.Tensor, members: tuple[torch.Tensor, torch.Tensor],
                          non_members: tuple[torch.Tensor, torch.Tensor], *, num_classes: int) -> MembershipResult:
    """Yeom et al.'s attack on the model at flat ``params``: score = −loss, members vs non-members ((x, y) each)."""
    member_loss = per_example_loss(model, params, *members, num_classes=num_classes)
    non_member_loss = per_example_loss(model, params, *non_members, num_classes=num_classes)
    return membership_scores(-member_loss, -non_member_loss)
