"""``fedpriv node policy | check | budget`` and ``fedpriv deploy supernode --policy``: a node operator's commands."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from fedpriv.node.ledger import NodeLedger
from fedpriv.node.policy import NodePolicy, load_policy
from fedpriv.node.terms import Release
from simulations.cli import app

cli = CliRunner()
CONFIG = "simulations/configs/digits_lr.toml"


def _flat(text: str) -> str:
    """The output without rich's line wrapping."""
    return re.sub(r"\s+", " ", text)


def test_policy_prints_the_default_and_the_narrowest_policy_of_a_config(tmp_path: Path) -> None:
    default = cli.invoke(app, ["node", "policy"])
    assert default.exit_code == 0, default.output
    (tmp_path / "default.toml").write_text(default.output)
    loaded = load_policy(tmp_path / "default.toml")
    assert loaded.tasks == NodePolicy.default().tasks and loaded.ledger == tmp_path / "ledger.json"
    assert default.output.startswith("# fedpriv node policy")
    narrow = cli.invoke(app, ["node", "policy", CONFIG, "--set", "analyzer-oracle=on"])
    assert narrow.exit_code == 0, narrow.output
    (tmp_path / "narrow.toml").write_text(narrow.output)
    policy = load_policy(tmp_path / "narrow.toml")
    assert policy.tasks == ("ldp-sgd",) and policy.switches == {"analyzer-oracle"}


def test_check_says_what_a_node_refuses_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(NodePolicy.default().to_toml())
    ok = cli.invoke(app, ["node", "check", str(path), CONFIG])
    assert ok.exit_code == 0 and "serves this ldp-sgd run" in _flat(ok.output), ok.output
    refused = cli.invoke(app, ["node", "check", str(path), CONFIG, "--set", "perturbation=none"])
    assert refused.exit_code == 1, refused.output
    assert "node policy refuses perturbation = 'none'" in _flat(refused.output)
    path.write_text("[release]\nmax-epsilon = 0\n")
    bad = cli.invoke(app, ["node", "check", str(path), CONFIG])
    assert bad.exit_code == 2 and "max-epsilon must be a number > 0" in _flat(bad.output), bad.output


def test_budget_prints_a_ledgers_spend_against_the_policys_budget(tmp_path: Path) -> None:
    ledger = NodeLedger(tmp_path / "ledger.json")
    for step in (1, 2):
        ledger.charge(Release(step=step, epsilon=0.75, delta=1e-6), run="41", task="mean", steps=5,
                      budget=(10.0, 1e-3))
    plain = cli.invoke(app, ["node", "budget", str(tmp_path / "ledger.json")])
    assert plain.exit_code == 0, plain.output
    assert "2 releases, spent ε = 1.5, δ = 2e-06" in _flat(plain.output) and "41" in plain.output
    policy = tmp_path / "node.toml"
    policy.write_text(NodePolicy(ledger=tmp_path / "ledger.json", budget_epsilon=10.0).to_toml())
    against = cli.invoke(app, ["node", "budget", str(policy)])
    assert against.exit_code == 0 and "of the lifetime budget ε = 10" in _flat(against.output), against.output
    assert "8.5 ε left" in _flat(against.output)
    (tmp_path / "broken.json").write_text("{")
    broken = cli.invoke(app, ["node", "budget", str(tmp_path / "broken.json")])
    assert broken.exit_code == 2 and "not valid JSON" in _flat(broken.output)


def test_deploy_supernode_refuses_a_bad_policy_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "node.toml"
    bad.write_text("[simulation]\nall = true\n")
    args = ["deploy", "supernode", "--superlink", "127.0.0.1:9", "--partition-id", "0", "--num-partitions", "1",
            "--insecure", "--port", "9", "--max-wait", "1", "--policy", str(bad)]
    result = cli.invoke(app, args)
    assert result.exit_code == 2 and "no such switch" in _flat(result.output), result.output
    assert "$ " not in result.output  # no command was started
