"""The checked setup of an MF run and each client's own data (a party's block, a device's ratings).

:func:`build_setup` maps the ``mf-*`` keys to :class:`~fedpriv.mf.config.MfConfig` and
:class:`~fedpriv.mf.data_spec.MfData`, loads the split (generated from the seed, or read from
``mf-path``), builds the parties and checks the budget before anything is written. A node keeps
only its own block: :func:`party_data` (VFL: the ratings of its items F_k; HFL: of its users U_k)
or :func:`device_data` (LFL: user i's ratings), each with the index spaces and rating range of the
whole data, so the core builds the same party or device from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.data.rating_partition import RatingSplit
from fedpriv.data.ratings import Ratings
from fedpriv.mf.config import MfConfig
from fedpriv.mf.data_spec import MfData, load_split, party_groups
from fedpriv.mf.keys import MfRunConfig
from fedpriv.mf.run import CENTRAL_ALGORITHMS, mf_config_from_run
from fedpriv.workloads.base import Setup
from fedpriv.workloads.mf.contract import config_digest

__all__ = ["DeviceData", "MfSetup", "PartyData", "build_setup", "device_data", "party_data", "steps"]


@dataclass(frozen=True)
class MfSetup(Setup):
    """A checked MF run: the algorithm's configuration, the data, its split, the parties and the seed.

    ``kind`` is ``"party"`` (VFL/HFL: one client per party), ``"device"`` (LFL: one client per
    user with training ratings, ``roster``) or ``"central"`` (the §8.5 central baselines: no
    clients, in process only).
    """

    cfg: MfConfig
    data: MfData
    split: RatingSplit
    groups: list[np.ndarray] | None
    seed: int
    digest: str
    kind: str
    roster: np.ndarray


@dataclass(frozen=True)
class PartyData:
    """Party k's own data: the ratings of its block (index spaces and range of the whole data) and the block."""

    split: RatingSplit
    group: np.ndarray
    k: int


@dataclass(frozen=True)
class DeviceData:
    """Device i's own training and test ratings (index spaces and range of the whole data)."""

    train: Ratings
    test: Ratings


def steps(config: Any) -> int:
    """Rounds (progress units) of an MF run: T = ``mf-rounds`` or the setting's default (§7)."""
    return int(config["mf-rounds"] or (10 if config["mf-setting"] == "lfl" else 100))


def _check_budget(cfg: MfConfig, R: float) -> None:
    """Calibrate the noise multiplier as the algorithm will: a target ε below the reachable floor fails here.

    VFL and the central loop calibrate z for TT′ + κ steps (``plan.step_plan``), HFL for TT′ steps
    (``hfl.noise_multiplier``); both raise naming the smallest reachable ε (§3.7.2). LFL's Gaussian
    releases have no floor (q = 1), so there is nothing to check before the run.
    """
    central = cfg.algorithm in CENTRAL_ALGORITHMS
    if not cfg.private or (cfg.setting == "lfl" and not central) or cfg.algorithm == "objpert":
        return  # objpert: pure ε of a one-off objective perturbation, no accountant floor
    try:
        if cfg.setting == "hfl" and not central:
            from fedpriv.mf.hfl import noise_multiplier

            noise_multiplier(cfg)
        else:
            from fedpriv.mf.plan import step_plan

            step_plan(cfg, R)
    except ValueError as exc:
        raise ValueError(f"party-epsilon = {cfg.epsilon!r} cannot be reached by this run (mf-rounds × mf-local-steps "
                         f"steps at mf-sampling-rate = {cfg.sampling_rate!r}): {exc}") from None


def build_setup(name: str, config: Any) -> MfSetup:
    """The checked setup of ``config``: every key, the data, the parties and the budget (nothing is written)."""
    from fedpriv.mf.lfl import lfl_roster

    view = MfRunConfig.of(config)
    cfg, data = mf_config_from_run(view)
    split = load_split(data, view["seed"])  # bad files, ranges and empty users fail here
    central = cfg.algorithm in CENTRAL_ALGORITHMS
    groups = None if central else party_groups(split, cfg, view["seed"])  # empty parties fail here
    _check_budget(cfg, float(split.train.r_max))
    kind = "central" if central else "device" if cfg.setting == "lfl" else "party"
    roster = (lfl_roster(split.train) if kind == "device" else
              np.arange(len(groups or ()), dtype=np.int64) if kind == "party" else np.zeros(0, np.int64))
    return MfSetup(workload=name, config=view, cfg=cfg, data=data, split=split, groups=groups, seed=view["seed"],
                   digest=config_digest(cfg), kind=kind, roster=roster)


def party_data(setup: MfSetup, k: int) -> PartyData:
    """Party k's block: VFL the ratings of its items F_k, HFL of its users U_k (the rest is dropped)."""
    group = np.asarray((setup.groups or [])[k])
    split = setup.split
    column = "items" if setup.cfg.setting == "vfl" else "users"
    own = [r.select(np.isin(getattr(r, column), group)) for r in (split.train, split.test)]
    return PartyData(split=RatingSplit(train=own[0], test=own[1]), group=group, k=int(k))


def device_data(setup: MfSetup, user: int) -> DeviceData:
    """Device ``user``'s own training and test ratings."""
    split = setup.split
    return DeviceData(train=split.train.select(np.asarray(split.train.users) == user),
                      test=split.test.select(np.asarray(split.test.users) == user))
