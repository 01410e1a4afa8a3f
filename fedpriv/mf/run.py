"""One federated MF run from a configuration: :func:`run_mf` dispatches to the setting's algorithm.

Guarantee: this module adds no computation of its own. It loads the data (:func:`load_split`, 90/10
per user, §8.2), partitions it into parties (:func:`party_groups`) and hands both to the algorithm
of (setting, algorithm) — ``run_vfl`` (§4), ``run_hfl`` (§5), ``run_lfl`` (§6) or ``run_central``
(the non-private central SGD and the single-party private step of §8.5) — so the result carries
exactly that algorithm's guarantee.

:func:`mf_config_from_run` maps the flat ``mf-*`` keys of :class:`fedpriv.mf.keys.MfRunConfig` (the
same keys Flower's run config holds) onto :class:`MfConfig` and :class:`MfData`; a bad value raises
``ValueError`` naming the run-config key. Conventions of the mapping (README "Matrix
factorization"): ``mf-private = "off"`` means no noise (``epsilon`` ignored, ``MfConfig.epsilon =
None``); ``mf-notion = "auto"`` is per-rating for VFL and per-user for HFL/LFL (§9 A21); 0 in
``mf-rounds`` / ``mf-theta`` and '' in ``mf-r-min`` / ``mf-r-max`` mean the default.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fedpriv.mf.central import CENTRAL_ALGORITHMS, run_central
from fedpriv.mf.config import MfConfig
from fedpriv.mf.result import MfResult

if TYPE_CHECKING:
    from fedpriv.mf.data_spec import MfData
    from fedpriv.mf.keys import MfRunConfig

__all__ = ["CENTRAL_ALGORITHMS", "CONFIG_KEYS", "DATA_KEYS", "mf_config_from_run", "run_mf"]

Progress = Callable[[dict[str, Any]], None]

#: Run-config key of every :class:`MfConfig` field that has one (the others keep their defaults).
CONFIG_KEYS: dict[str, str] = {
    "setting": "mf-setting", "algorithm": "mf-algorithm", "notion": "mf-notion", "epsilon": "party-epsilon",
    "delta": "party-delta", "rank": "mf-rank", "parties": "mf-parties", "partition": "mf-partition",
    "rounds": "mf-rounds", "local_steps": "mf-local-steps", "finetune_steps": "mf-finetune-steps",
    "sampling_rate": "mf-sampling-rate", "sampling": "mf-sampling", "theta": "mf-theta",
    "step_size": "mf-step-size", "noise_on": "mf-noise-on", "clip": "mf-clip",
    "clip_threshold": "mf-clip-threshold", "l2": "mf-l2", "pretrain_steps": "mf-pretrain-steps",
    "pretrain_rate": "mf-pretrain-rate", "local_finetune_steps": "mf-local-finetune-steps",
    "pretrain_u": "mf-pretrain-u", "lfl_step_size": "mf-lfl-step-size", "omega": "secagg-omega", "dropout_rate": "dropout-rate",
    "lfl_mode": "secagg-noise", "aggregator": "secagg", "secagg_graph": "secagg-graph",
    "secagg_corrupt": "secagg-corrupt", "secagg_degree": "secagg-degree", "secagg_threshold": "secagg-threshold",
    "conversion": "mf-conversion",
    "vfl_composition": "mf-composition", "accountant": "mf-accountant", "source_constant": "mf-source-constant",
    "clip_predictions": "mf-clip-predictions",
}
#: Run-config key of every :class:`MfData` field.
DATA_KEYS: dict[str, str] = {
    "dataset": "mf-data", "path": "mf-path", "format": "mf-format", "r_min": "mf-r-min", "r_max": "mf-r-max",
    "synthetic_users": "mf-synthetic-users", "synthetic_items": "mf-synthetic-items",
    "synthetic_rank": "mf-synthetic-rank", "synthetic_density": "mf-synthetic-density",
    "synthetic_noise": "mf-synthetic-noise", "test_fraction": "mf-test-fraction",
}


def _renamed(exc: ValueError, keys: dict[str, str]) -> ValueError:
    """``exc`` with the field names it mentions replaced by run-config keys.

    Renamed: the leading word, ``field=``, and any snake_case field name (plain words such as
    "setting" stay as they are in the prose).
    """
    text = str(exc)
    head = re.match(r"\w+", text)
    if head is not None and head.group(0) in keys:
        text = keys[head.group(0)] + text[head.end():]
    return ValueError(re.sub(r"\b(\w+)\b(?= ?=)|\b(\w+_\w+)\b",
                             lambda m: keys.get(m.group(0), m.group(0)), text))


def _number_or_none(text: str) -> float | None:
    """'' → None, else the number (the key's check already accepted it)."""
    return float(text) if text.strip() else None


def mf_config_from_run(config: MfRunConfig) -> tuple[MfConfig, MfData]:
    """The :class:`MfConfig` and :class:`MfData` of a run configuration; a bad value names its run-config key."""
    from fedpriv.mf.keys import MfRunConfig

    config = MfRunConfig.of(config)
    return _mf_config(config), _mf_data(config)


def _mf_config(config: MfRunConfig) -> MfConfig:
    """:class:`MfConfig` from the ``mf-*`` keys, ``party-epsilon``, ``party-delta`` and the secagg keys."""
    setting = config["mf-setting"]
    notion = config["mf-notion"]
    if notion == "auto":  # §9 A21: per-rating holds for VFL only; HFL/LFL default to per-user
        notion = "per-rating" if setting == "vfl" else "per-user"
    values: dict[str, Any] = {field: config[key] for field, key in CONFIG_KEYS.items()}
    values.update(
        notion=notion,
        epsilon=config["party-epsilon"] if config["mf-private"] == "on" else None,
        rounds=config["mf-rounds"] or None,
        theta=config["mf-theta"] or None,
        clip_predictions=config["mf-clip-predictions"] == "on",
        pretrain_u=config["mf-pretrain-u"] == "on",
    )
    try:
        return MfConfig(**values)
    except ValueError as exc:
        raise _renamed(exc, CONFIG_KEYS) from None


def _mf_data(config: MfRunConfig) -> MfData:
    """:class:`MfData` from ``mf-data``, ``mf-path``, ``mf-format``, the rating range and the generator's keys."""
    from fedpriv.mf.data_spec import MfData

    values: dict[str, Any] = {field: config[key] for field, key in DATA_KEYS.items()}
    values.update(r_min=_number_or_none(config["mf-r-min"]), r_max=_number_or_none(config["mf-r-max"]))
    try:
        return MfData(**values)
    except ValueError as exc:
        raise _renamed(exc, DATA_KEYS) from None


def run_mf(config: MfConfig, data: MfData, seed: int, progress: Progress | None = None) -> MfResult:
    """Load ``data`` (split keyed by ``seed``) and run ``config``'s algorithm in process; ``progress(dict)`` per round."""
    from fedpriv.mf.data_spec import load_split, party_groups

    split = load_split(data, seed)
    if config.algorithm in CENTRAL_ALGORITHMS:  # one central party in any setting (§8.5)
        return run_central(split, config, seed, progress)
    if config.setting == "lfl":
        from fedpriv.mf.lfl import run_lfl

        return run_lfl(split, config, seed, progress)
    groups = party_groups(split, config, seed)
    if config.setting == "vfl":
        from fedpriv.mf.vfl import run_vfl

        return run_vfl(split, groups, config, seed, progress)
    from fedpriv.mf.hfl import run_hfl

    return run_hfl(split, groups, config, seed, progress)
