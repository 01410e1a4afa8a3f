"""RunConfig: defaults, TOML, --set overrides, and the error for an unknown key or a bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpriv.config import KEYS, RunConfig, describe_keys, parse_override

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "simulations" / "configs").glob("*.toml"))


def test_defaults_cover_every_key() -> None:
    cfg = RunConfig()
    assert set(cfg.to_dict()) == set(KEYS)
    assert cfg.num_clients == KEYS["num-clients"].default
    assert cfg["clip-norm"] == cfg.clip_norm


def test_overrides_are_typed_and_validated() -> None:
    cfg = RunConfig().with_overrides(["num-clients=10", "epsilon=2", "perturbation=ldpvec", "lr=0.05"])
    assert cfg.num_clients == 10 and isinstance(cfg.num_clients, int)
    assert cfg.epsilon == 2.0 and isinstance(cfg.epsilon, float)
    assert cfg.changed() == {"num-clients": 10, "epsilon": 2.0, "perturbation": "ldpvec", "lr": 0.05}


@pytest.mark.parametrize(
    "override, match",
    [
        ("epsilons=1", "^unknown config key 'epsilons' — did you mean 'epsilon'\\?$"),
        ("epsilon=0", "epsilon must be > 0 and finite, got 0.0"),
        ("epsilon=-1", "epsilon must be > 0 and finite"),
        ("epsilon=inf", "epsilon must be > 0 and finite"),
        ("local-steps=0", "local-steps must be >= 1, got 0"),
        ("model=resnet", "model must be 'lr', 'mlp', 'cnn', 'cnn-thesis' or 'package.module:factory', got 'resnet'"),
        ("rounds=2.5", "rounds must be an integer, got '2.5'"),
        ("delta=1", r"delta must be in \(0, 1\)"),
        ("beta=0", r"beta must be in \(0, 1\]"),
        ("noise-schedule=sometimes", "noise-schedule must be one of 'last_step', 'every_step'"),
        ("no-equals-sign", "override must look like key=value"),
    ],
)
def test_bad_override_names_the_key_and_the_allowed_values(override: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RunConfig().with_overrides([override])


def test_toml_with_run_table_and_unknown_key(tmp_path: Path) -> None:
    good = tmp_path / "a.toml"
    good.write_text('[run]\nnum-clients = 7\nmodel = "mlp"\n')
    cfg = RunConfig.from_toml(good)
    assert cfg.num_clients == 7 and cfg.model == "mlp"
    bad = tmp_path / "b.toml"
    bad.write_text("num-client = 7\n")
    with pytest.raises(ValueError, match="^unknown config key 'num-client' — did you mean 'num-clients'\\?$"):
        RunConfig.from_toml(bad)


def test_digest_depends_on_values_only() -> None:
    a = RunConfig().with_overrides(["epsilon=2"])
    b = RunConfig.from_mapping({"epsilon": 2.0})
    assert a.digest() == b.digest()
    assert a.digest() != RunConfig().digest()


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_load(path: Path) -> None:
    assert RunConfig.from_toml(path).changed()


def test_parse_override_and_key_table() -> None:
    assert parse_override(" epsilon = 3 ") == ("epsilon", "3")
    rows = describe_keys()
    assert {r["key"] for r in rows} == set(KEYS)


def test_unknown_keys_get_the_closest_key_or_a_pointer_to_the_list_not_every_key() -> None:
    with pytest.raises(ValueError) as caught:
        RunConfig.from_mapping({"clip_norm": 1.0, "zzzqq": 1})
    message = str(caught.value)
    assert message == ("unknown config key 'clip_norm' — did you mean 'clip-norm'?; "
                       "unknown config key 'zzzqq' (`fedpriv keys` lists the valid keys)")
    assert "mf-synthetic-noise" not in message  # the full key list is no longer dumped


def test_describe_keys_of_one_task_is_the_common_table_and_its_own() -> None:
    rows = {r["key"]: r for r in describe_keys("secure-sum")}
    assert {"task", "seed", "run-epsilon", "secagg-omega", "sum-clip-norm"} <= set(rows)
    assert not {"epsilon", "delta", "rounds", "clip-norm"} & set(rows)  # secure-sum's own keys replace them
    assert rows["run-epsilon"]["replaces"] == "epsilon (secure-sum)" and rows["run-epsilon"]["table"] == "privacy"
    assert "mf-rank" not in rows and "kmeans-method" not in rows
    assert rows["secagg"]["allowed"] == "oracle, protocol" and rows["secagg"]["type"] == "str"
    with pytest.raises(ValueError, match="task must be one of 'ldp-sgd'"):
        describe_keys("nope")
