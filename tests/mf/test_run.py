"""fedpriv.mf.run: the run-config → MfConfig/MfData mapping, its errors, and run_mf's dispatch."""

from __future__ import annotations

import dataclasses

import pytest

import fedpriv.mf
from fedpriv.config import KEYS, RunConfig
from fedpriv.mf.central import run_central
from fedpriv.mf.config import MfConfig
from fedpriv.mf.data_spec import MfData, load_split, party_groups
from fedpriv.mf.hfl import run_hfl
from fedpriv.mf.lfl import run_lfl
from fedpriv.mf.run import CONFIG_KEYS, DATA_KEYS, mf_config_from_run, run_mf
from fedpriv.mf.vfl import run_vfl

TINY = {"task": "mf", "mf-synthetic-users": 40, "mf-synthetic-items": 30, "mf-synthetic-density": 0.3,
        "mf-rank": 3, "mf-rounds": 2, "mf-local-steps": 2, "mf-sampling-rate": 0.3, "mf-pretrain-steps": 5,
        "mf-local-finetune-steps": 3, "epsilon": 5.0, "seed": 3}


def _config(**values: object) -> RunConfig:
    return RunConfig.from_mapping({**TINY, **{k.replace("_", "-"): v for k, v in values.items()}})


def test_every_field_maps_to_a_run_config_key() -> None:
    config_fields = {f.name for f in dataclasses.fields(MfConfig)}
    assert set(CONFIG_KEYS) <= config_fields
    # the fields without a key keep MfConfig's defaults (the learning-rate decay shape, §3.8)
    assert config_fields - set(CONFIG_KEYS) == {"lr_end_ratio", "lr_decay_fraction"}
    assert set(DATA_KEYS) == {f.name for f in dataclasses.fields(MfData)}
    assert set(CONFIG_KEYS.values()) | set(DATA_KEYS.values()) <= set(KEYS)
    mf_keys = {k for k in KEYS if k.startswith("mf-")}
    # every mf-* key is read (mf-private and the auto notion are resolved into epsilon and notion; mf-evaluate is
    # the workload's: whether its protocol asks the evaluation channel)
    assert mf_keys - set(CONFIG_KEYS.values()) - set(DATA_KEYS.values()) == {"mf-private", "mf-evaluate"}


def test_defaults_match_the_dataclasses() -> None:
    cfg, data = mf_config_from_run(RunConfig.from_mapping({"task": "mf"}))
    assert cfg == MfConfig()
    assert data == MfData()


@pytest.mark.parametrize("setting, notion", [("vfl", "per-rating"), ("hfl", "per-user"), ("lfl", "per-user")])
def test_auto_notion_is_per_rating_for_vfl_only(setting: str, notion: str) -> None:
    cfg, _ = mf_config_from_run(_config(mf_setting=setting))
    assert cfg.notion == notion
    assert mf_config_from_run(_config(mf_setting=setting, mf_notion="per-rating-paper"))[0].notion == "per-rating-paper"


def test_resolved_values() -> None:
    cfg, data = mf_config_from_run(_config(
        mf_private="off", mf_rounds=0, mf_theta=0, mf_clip_predictions="on", mf_r_min="0.5", mf_r_max="5",
        mf_setting="lfl", secagg="protocol", secagg_omega=0.6, secagg_noise="paper", dropout_rate=0.4,
        mf_composition="sqrt-sum", mf_test_fraction=0.2))
    assert cfg.epsilon is None and not cfg.private
    assert cfg.rounds is None and cfg.total_rounds == 10 and cfg.theta is None and cfg.clip_predictions
    assert (cfg.aggregator, cfg.omega, cfg.lfl_mode, cfg.dropout_rate) == ("protocol", 0.6, "paper", 0.4)
    assert cfg.vfl_composition == "sqrt-sum"
    assert (data.r_min, data.r_max, data.test_fraction) == (0.5, 5.0, 0.2)
    on, _ = mf_config_from_run(_config(mf_rounds=7, mf_theta=4, mf_notion="per-user"))
    assert (on.epsilon, on.rounds, on.theta, on.trimming) == (5.0, 7, 4, 4)


@pytest.mark.parametrize("values, match", [
    ({"mf-setting": "hfl", "mf-algorithm": "central-dp"}, "^mf-algorithm must be one of 'sgdmf', 'fmf'"),
    ({"mf-setting": "hfl", "mf-notion": "per-rating"}, "^mf-notion 'per-rating' does not hold for setting 'hfl'"),
    ({"mf-setting": "lfl", "dropout-rate": 0.3}, r"^dropout-rate must be < secagg-omega = 0.3 .*got dropout-rate=0.3"),
    ({"secagg-omega": 0.0}, r"^secagg-omega must be in \(0, 1\), got 0.0"),
    ({"mf-clip": "none"}, "^mf-clip must be 'embedding' or 'gradient' for a private run"),
    ({"mf-l2": 0.1}, "^mf-l2 must be 0 for a private run .*got mf-l2=0.1"),
    ({"mf-algorithm": "objpert"}, "^mf-l2 must be > 0 for algorithm 'objpert' .*got mf-l2=0.0"),
    ({"mf-algorithm": "objpert", "mf-l2": 1.0, "mf-notion": "per-user"},
     "^mf-notion must be 'per-rating' for algorithm 'objpert'"),
    ({"mf-setting": "hfl", "mf-algorithm": "dp-sgld"}, "^mf-algorithm must be one of 'sgdmf', 'fmf'"),
    ({"mf-partition": "genre", "mf-algorithm": "central-dp"}, "^mf-partition 'genre' needs a multi-party VFL"),
    ({"mf-data": "file"}, "^mf-path must name a ratings file when mf-data='file', got ''"),
    ({"mf-format": "xml"}, "^mf-format must be one of 'auto', .*got 'xml'"),
    ({"mf-r-min": "5", "mf-r-max": "1"}, "^mf-r-min must be < mf-r-max, got mf-r-min=5.0, mf-r-max=1.0"),
    ({"secagg-threshold": 5}, "^secagg-degree and secagg-threshold overrides need secagg-graph = 'harary'"),
])
def test_bad_values_name_the_run_config_key(values: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mf_config_from_run(RunConfig.from_mapping({**TINY, **values}))


@pytest.mark.parametrize("values", [
    {"mf-setting": "vfl", "mf-parties": 2},
    {"mf-setting": "hfl", "mf-parties": 3},
    {"mf-setting": "lfl"},
    {"mf-setting": "hfl", "mf-algorithm": "central-sgd", "mf-private": "off", "mf-step-size": 0.001},
    {"mf-setting": "vfl", "mf-algorithm": "central-dp"},
    {"mf-setting": "vfl", "mf-algorithm": "dp-sgld", "mf-l2": 0.1},
    {"mf-setting": "vfl", "mf-algorithm": "objpert", "mf-l2": 5.0, "mf-rounds": 3},
])
def test_run_mf_dispatches_to_the_settings_algorithm(values: dict) -> None:
    config = RunConfig.from_mapping({**TINY, **values})
    cfg, data = mf_config_from_run(config)
    rounds: list[dict] = []
    got = run_mf(cfg, data, config.seed, progress=rounds.append)
    split = load_split(data, config.seed)
    if cfg.algorithm in ("central-sgd", "central-dp", "dp-sgld", "objpert"):
        expected = run_central(split, cfg, config.seed)
    elif cfg.setting == "lfl":
        expected = run_lfl(split, cfg, config.seed)
    else:
        run = run_vfl if cfg.setting == "vfl" else run_hfl
        expected = run(split, party_groups(split, cfg, config.seed), cfg, config.seed)
    assert (got.setting, got.algorithm, got.notion) == (expected.setting, expected.algorithm, expected.notion)
    assert got.test_mse == expected.test_mse and got.epsilon == expected.epsilon
    assert [r["test_mse"] for r in rounds] == [r.test_mse for r in expected.rounds]
    assert len(rounds) == len(expected.rounds) >= 1


def test_package_exports_load_lazily() -> None:
    assert fedpriv.mf.run_mf is run_mf and fedpriv.mf.MfData is MfData
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        fedpriv.mf.nope  # noqa: B018
