"""The training data of a central (single-party) MF baseline, checked and trimmed (docs/federated_mf.md §8.5).

:func:`central_data` is what every central loop (``central-sgd``, ``central-dp``, ``dp-sgld``,
``objpert``) starts from: the rating range R, the ratings checked against it (bounded wherever
the sensitivity uses R), random per-user trimming to θ where the step plan asks for it (§3.3), and
the training ratings as flat arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedpriv._validation import check_int
from fedpriv.data.rating_partition import trim_per_user
from fedpriv.mf.config import MfConfig
from fedpriv.mf.fmf import check_rating_range
from fedpriv.mf.plan import StepPlan, step_plan

if TYPE_CHECKING:
    from fedpriv.data.rating_partition import RatingSplit
    from fedpriv.data.ratings import Ratings

__all__ = ["CentralData", "central_data"]

_PARTY = 0  # the single party's index: its trimming is keyed as VFL party 0's


@dataclass(frozen=True)
class CentralData:
    """One central party's data: the split, R, r_min, the sizes, the step plan (if any) and the (trimmed) ratings."""

    train: Ratings
    test: Ratings
    R: float
    r_min: float
    n: int
    m: int
    plan: StepPlan | None
    users: np.ndarray
    items: np.ndarray
    values: np.ndarray


def central_data(split: RatingSplit, config: MfConfig, seed: int, *, with_plan: bool = True) -> CentralData:
    """The checked (and, under the plan's θ, trimmed) training ratings; ``with_plan=False``: no step plan, bounded range."""
    seed = check_int(seed, "seed", minimum=0)
    train, test = split.train, split.test
    R, r_min = float(train.r_max), float(train.r_min)
    plan = step_plan(config, R) if with_plan else None
    bounded = plan is None or plan.R is not None
    check_rating_range(train.values, r_min, R, bounded=bounded, name="training ratings")
    check_rating_range(test.values, r_min, R, bounded=bounded, name="test ratings")
    theta = None if plan is None else plan.theta
    data = trim_per_user(train, theta, seed=seed, salt=_PARTY) if theta is not None else train
    if len(data) == 0:
        raise ValueError("the training set must hold at least one rating, got 0")
    return CentralData(train=train, test=test, R=R, r_min=r_min, n=int(train.n_users), m=int(train.n_items),
                       plan=plan, users=np.asarray(data.users, dtype=np.int64),
                       items=np.asarray(data.items, dtype=np.int64), values=np.asarray(data.values, dtype=np.float64))
