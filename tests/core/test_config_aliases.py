"""Renamed keys and TOML tables (docs/configuration.md): each old name is read as its task's new key in every
entry, with one notice per process; both names with different values are refused; a digest keeps its value;
nested tables round-trip and a key in the wrong table is refused naming the file, the table and the allowed ones."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from clients.contract import run_config_from
from fedpriv import config_aliases
from fedpriv.config import RunConfig
from fedpriv.config_aliases import RENAMED, FedprivDeprecationWarning
from fedpriv.errors import FedprivError
from fedpriv.keys import TABLES
from fedpriv.workloads.registry import BUILTIN_KEYS, table

#: One non-default value per old name, valid for both the old key and the new one.
VALUES = {"epsilon": 2.5, "delta": 1e-6, "rounds": 4, "clip-norm": 0.5}
ALIASES = [(task, old, new) for task, names in RENAMED.items() for old, new in names.items()]


@pytest.fixture(autouse=True)
def _fresh_notices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_aliases, "_NOTIFIED", set())


@pytest.mark.parametrize("task, old, new", ALIASES)
def test_each_old_name_is_read_as_its_tasks_new_key_in_every_entry(task: str, old: str, new: str,
                                                                   tmp_path: Path) -> None:
    value = VALUES[old]
    with pytest.warns(FedprivDeprecationWarning, match=f"'{old}' is called '{new}' for task '{task}'"):
        by_mapping = RunConfig.from_mapping({"task": task, old: value})
    assert by_mapping[new] == value and old not in by_mapping.values and old not in table(task)
    assert new in table(task) and BUILTIN_KEYS[new].help != BUILTIN_KEYS[old].help
    path = tmp_path / "old.toml"
    path.write_text(f'task = "{task}"\n{old} = {value!r}\n')
    assert RunConfig.from_toml(path) == by_mapping
    assert RunConfig.from_mapping({"task": task}).with_overrides([f"{old}={value}"]) == by_mapping
    assert RunConfig().replace(task=task, **{old.replace("-", "_"): value}) == by_mapping
    assert run_config_from({"task": task, old: value}) == by_mapping  # an app that lists only the old name
    assert by_mapping[old] == value and getattr(by_mapping, old.replace("-", "_")) == value  # reads too
    assert RunConfig.from_mapping({"task": "ldp-sgd", old: value})[old] == value  # the LDP workloads keep it


def test_the_notice_is_given_once_per_process_and_is_a_fedprivs_deprecation() -> None:
    assert issubclass(FedprivDeprecationWarning, FedprivError) and issubclass(FedprivDeprecationWarning,
                                                                              DeprecationWarning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            RunConfig.from_mapping({"task": "secure-sum", "epsilon": 2.0})
            RunConfig.from_mapping({"task": "secure-sum", "run-epsilon": 2.0})["epsilon"]
    notices = [str(w.message) for w in caught if issubclass(w.category, FedprivDeprecationWarning)]
    assert len(notices) == 1 and "\n" not in notices[0] and "write 'run-epsilon'" in notices[0]


def test_the_notice_is_shown_by_default() -> None:
    """Python hides DeprecationWarning outside __main__; a user's renamed key is shown all the same."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("ignore", DeprecationWarning)  # Python's default filter
        warnings.filterwarnings("always", category=FedprivDeprecationWarning)  # what fedpriv.config_aliases adds
        RunConfig.from_mapping({"task": "mf", "delta": 1e-4})
    assert [w.category for w in caught] == [FedprivDeprecationWarning]


@pytest.mark.parametrize("task, old, new", ALIASES)
def test_both_names_with_different_values_are_refused_naming_both(task: str, old: str, new: str) -> None:
    value = VALUES[old]
    other = value * 3 if old != "delta" else 1e-7  # neither holds its default
    with pytest.raises(ValueError, match=f"config keys '{old}' and '{new}' are one key for task '{task}'.*"
                                         f"give only '{new}'"):
        RunConfig.from_mapping({"task": task, old: value, new: other})
    with pytest.raises(ValueError, match=f"'{old}' and '{new}'"):
        RunConfig.from_mapping({"task": task}).with_overrides([f"{old}={value}", f"{new}={other}"])
    assert RunConfig.from_mapping({"task": task, old: value, new: value})[new] == value  # the same value: fine


def test_a_full_dump_and_flowers_run_config_carry_the_old_names_without_conflict() -> None:
    switched = RunConfig.from_mapping({**RunConfig().to_dict(), "task": "secure-sum", "run-epsilon": 2.0})
    assert switched["run-epsilon"] == 2.0  # the dump's epsilon holds its default: carried along, not given
    ldp = RunConfig.from_mapping({"epsilon": 3.0, "rounds": 4})
    with pytest.raises(ValueError, match="'epsilon' and 'run-epsilon'"):  # which one was meant: ask
        RunConfig.from_mapping({**ldp.to_dict(), "task": "secure-sum", "run-epsilon": 2.0})
    assert ldp.replace(task="secure-sum")["run-epsilon"] == 1.0  # ldp-sgd's per-round ε is not carried over
    app = {**RunConfig().to_dict(), "rounds": 3, "sum-iterations": 3}  # what [tool.flwr.app.config] lists
    assert run_config_from({**app, "task": "secure-sum", "sum-iterations": 5})["sum-iterations"] == 5
    assert run_config_from({**app, "task": "ldp-sgd", "rounds": 7})["rounds"] == 7


def test_the_digest_hashes_the_renamed_keys_under_their_old_names() -> None:
    """The digests of the same configurations before the keys were renamed (pinned)."""
    secure_sum = {"task": "secure-sum", "num-clients": 12, "mean-dims": 6, "secagg": "oracle"}
    old = RunConfig.from_mapping({**secure_sum, "rounds": 3, "epsilon": 2.0, "delta": 1e-6, "clip-norm": 0.5})
    new = RunConfig.from_mapping({**secure_sum, "sum-iterations": 3, "run-epsilon": 2.0, "run-delta": 1e-6,
                                  "sum-clip-norm": 0.5})
    assert old == new and new.digest() == "6302c4062bc38a09"
    mf = RunConfig.from_mapping({"task": "mf", "party-epsilon": 5.0, "party-delta": 1e-4, "mf-rounds": 2})
    assert mf.digest() == "7ae1e8eaf4d52a4d"
    assert RunConfig.from_mapping({"epsilon": 3.0, "rounds": 4}).digest() == "f051c04eb4268f15"


def test_nested_tables_round_trip(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({"task": "secure-sum", "run-epsilon": 2.0, "sum-iterations": 3, "mean-dims": 6,
                                  "secagg": "protocol", "model": "mlp"})
    text = cfg.to_toml()
    assert "[privacy]\n" in text and "[secure_sum]\n" in text and "\nepsilon =" not in text
    path = tmp_path / "nested.toml"
    path.write_text(text)
    assert RunConfig.from_toml(path) == cfg
    path.write_text('[run]\ntask = "mf"\n\n[privacy]\nparty-epsilon = 4.0\n\n[mf]\nmf-rank = 3\n')
    assert RunConfig.from_toml(path).changed() == {"task": "mf", "party-epsilon": 4.0, "mf-rank": 3}
    assert all(BUILTIN_KEYS[k].table in TABLES for k in BUILTIN_KEYS)


@pytest.mark.parametrize("text, match", [
    ('[data]\nepsilon = 2.0\n', r"key 'epsilon' is in table \[data\] but belongs in \[privacy\]"),
    ('[ldp_sgd]\nmodel = "mlp"\n', r"unknown table \[ldp_sgd\]"),
    ('[privacy]\nepsilonn = 2.0\n', r"unknown config key 'epsilonn'.* in table \[privacy\]"),
    ('[privacy.more]\nepsilon = 2.0\n', r"table \[privacy.more\] is nested"),
    ('epsilon = 2.0\n[privacy]\nepsilon = 3.0\n', r"key 'epsilon' is given twice"),
])
def test_a_key_in_the_wrong_table_or_an_unknown_table_is_refused(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as caught:
        RunConfig.from_toml(path)
    if "is given twice" not in match:
        assert str(path) in str(caught.value) and "allowed tables: [run], [privacy]" in str(caught.value)
