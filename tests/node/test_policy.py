"""The node policy: one test per rule, the TOML file's checks, and the narrowest policy of a run."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from fedpriv.config import RunConfig
from fedpriv.node.policy import DEFAULT_CAPS, NodePolicy, PolicyRefusal, load_policy, node_policy
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.workloads import get_workload
from fedpriv.workloads.registry import BUILTIN_NAMES

LDP = get_workload("ldp-sgd")
HONEST = RunConfig.from_mapping({"num-clients": 3, "rounds": 3, "local-steps": 2, "epsilon": 1.0})


def _terms(**overrides: object) -> NodeTerms:
    return LDP.deployment.node_terms(HONEST.with_values(overrides))


def test_the_default_policy_admits_an_honest_run() -> None:
    NodePolicy.default().admit(_terms())


def test_the_default_policy_serves_every_built_in_workload() -> None:
    """``fedpriv.keys.BUILTIN_TASKS`` (what the node layer reads) names the registry's built-ins, in order."""
    assert NodePolicy.default().tasks == BUILTIN_NAMES


#: The policy the rules below are checked against: the default, narrowed where a row needs it.
NARROW = replace(NodePolicy.default(), tasks=("ldp-sgd",), perturbations=("coordinatewise", "ldpvec", "dpsgd"),
                 mechanisms=("piecewise", "gaussian"), min_clip_norm=0.1, max_clip_norm=10.0)


@pytest.mark.parametrize("overrides, key, asked, limit", [
    ({"task": "mean"}, "task", "mean", "allows tasks ldp-sgd"),
    ({"perturbation": "geodp"}, "perturbation", "geodp", "allows perturbations coordinatewise, ldpvec, dpsgd"),
    ({"mechanism": "laplace"}, "mechanism", "laplace", "allows mechanisms piecewise, gaussian"),
    ({"perturbation": "none"}, "perturbation", "none", "simulation-only switch 'no-noise'"),
    ({"analyzer-oracle": "on"}, "analyzer-oracle", "on", "simulation-only switch 'analyzer-oracle'"),
    ({"attack": "sign-flip"}, "attack", "sign-flip", "simulation-only switch 'attacks'"),
    ({"perturbation": "ldpvec", "ldpvec-control": "skip"}, "ldpvec-control", "skip", "simulation-only switch 'controls'"),
    ({"noise-schedule": "last_step"}, "noise-schedule", "last_step", "noise-covers-upload = true"),
    ({"perturbation": "dpsgd", "sigma": 0.4}, "sigma", 0.4, "min-sigma = 0.5"),
    ({"clip-norm": 50.0}, "clip-norm", 50.0, "clip norms in [0.1, 10]"),
    ({"epsilon": 12.0}, "epsilon", 12.0, "max-epsilon = 10"),
    ({"mechanism": "gaussian", "delta": 1e-3}, "epsilon", 1.0, "max-delta = 1e-05"),
    ({"model": "os.path:join"}, "model", "os.path:join", "only the built-in models"),
    ({"dataset": "csv:data.csv"}, "dataset", "data.csv", "opens no data files"),
    ({"num-clients": 2_000_000}, "num-clients", 2_000_000, "[caps] clients"),
    ({"rounds": 200_000}, "rounds", 200_000, "[caps] rounds"),
    ({"local-steps": 20_000_000}, "local-steps", 20_000_000, "[caps] steps"),
    ({"dataset": "synthetic", "synthetic-samples": 1_000_000, "synthetic-features": 1000},
     "synthetic-samples × synthetic-features", 10**9, "[caps] data-values"),
])
def test_each_rule_refuses_naming_the_key_the_value_and_the_limit(overrides, key, asked, limit) -> None:
    terms = (NodeTerms(task="mean") if overrides.get("task") == "mean" else _terms(**overrides))
    with pytest.raises(PolicyRefusal) as refusal:
        NARROW.admit(terms)
    assert refusal.value.key == key and refusal.value.asked == asked
    assert limit in str(refusal.value), str(refusal.value)
    assert str(refusal.value).startswith(f"node policy refuses {key} = {asked!r}: ")


def test_a_switch_on_admits_what_it_names_and_nothing_else() -> None:
    policy = replace(NodePolicy.default(), switches=frozenset({"analyzer-oracle"}))
    policy.admit(_terms(**{"analyzer-oracle": "on"}))
    with pytest.raises(PolicyRefusal, match="'attacks'"):
        policy.admit(_terms(**{"analyzer-oracle": "on", "attack": "sign-flip"}))


def test_a_release_above_the_ceiling_is_refused() -> None:
    policy = NodePolicy.default()
    policy.check_release(Release(step=1, epsilon=10.0))
    with pytest.raises(PolicyRefusal, match="above this node's ceiling max-epsilon = 10"):
        policy.check_release(Release(step=1, epsilon=10.5))
    with pytest.raises(PolicyRefusal, match="max-epsilon"):
        policy.check_release(Release(step=1, epsilon=math.inf, key="perturbation", asked="none"))
    with pytest.raises(PolicyRefusal, match="max-delta = 1e-05"):
        policy.check_release(Release(step=1, epsilon=1.0, delta=2e-5))


def test_paths_resolve_inside_the_data_root_and_never_escape_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "ok.csv").write_text("x,y\n")
    (tmp_path / "secret.csv").write_text("TOKEN=1\n")
    (root / "link.csv").symlink_to(tmp_path / "secret.csv")
    policy = replace(NodePolicy.default(), data_root=root)
    assert policy.resolve("dataset", "ok.csv") == (root / "ok.csv").resolve()
    assert policy.resolve("dataset", str(root / "ok.csv")) == (root / "ok.csv").resolve()
    for escape in ("../secret.csv", str(tmp_path / "secret.csv"), "link.csv", "/proc/self/environ"):
        with pytest.raises(PolicyRefusal, match="only inside its data-root"):
            policy.resolve("dataset", escape)


def test_a_policy_file_round_trips_and_bad_files_name_the_key(tmp_path: Path) -> None:
    policy = replace(NodePolicy.default(), tasks=("mean",), max_epsilon=2.0, budget_epsilon=20.0,
                     ledger=tmp_path / "l.json", data_root=tmp_path, caps={**DEFAULT_CAPS, "clients": 50},
                     switches=frozenset({"keyed-noise"}), max_dropout=0.2, min_roster=5)
    path = tmp_path / "node.toml"
    path.write_text(policy.to_toml())
    loaded = load_policy(path)
    assert replace(loaded, source="") == replace(policy, source="")
    assert node_policy({"fedpriv-policy": str(path)}) == loaded
    assert node_policy({}) == NodePolicy.default()
    relative = tmp_path / "rel.toml"
    relative.write_text('[budget]\nledger = "ledgers/node.json"\n[caps]\nclients = 7\n')
    rel = load_policy(relative)
    assert rel.ledger == tmp_path / "ledgers" / "node.json" and rel.caps["clients"] == 7
    assert rel.caps["rounds"] == DEFAULT_CAPS["rounds"]  # a file's caps extend the defaults
    for text, match in [
        ("epsilon = 3\n", "unknown key"),
        ("[release]\nmax-epsilon = -1\n", "max-epsilon must be a number > 0"),
        ("[simulation]\nkeyed-noise = 1\n", "must be true or false"),
        ("[simulation]\nsilent = true\n", "no such switch"),
        ("[caps]\nclients = 0\n", "clients must be an integer >= 1"),
        ("[caps]\nmemory = 3\n", "no cap 'memory'"),
        ("tasks = 'ldp-sgd'\n", "tasks must be a list of strings"),
        ("[release] = 3\n", "cannot be read"),
    ]:
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(ValueError, match=match) as error:
            load_policy(bad)
        assert str(bad) in str(error.value)
    with pytest.raises(ValueError, match="does not exist"):
        load_policy(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="node config fedpriv-policy: the policy file .* cannot be read"):
        node_policy({"fedpriv-policy": str(tmp_path / "missing.toml")})


def test_the_narrowest_policy_of_a_run_admits_it_and_nothing_wider(tmp_path: Path) -> None:
    terms = _terms(**{"analyzer-oracle": "on", "dataset": f"csv:{tmp_path / 'd.csv'}", "label-column": "y"})
    policy = NodePolicy.for_run(terms, ledger=tmp_path / "ledger.json", keyed_noise=True)
    policy.admit(terms)
    assert policy.tasks == ("ldp-sgd",) and policy.switches == {"analyzer-oracle", "keyed-noise"}
    assert policy.data_root == tmp_path.resolve()
    with pytest.raises(PolicyRefusal, match="'attacks'"):
        policy.admit(_terms(**{"analyzer-oracle": "on", "attack": "sign-flip"}))
    with pytest.raises(PolicyRefusal, match="allows tasks ldp-sgd"):
        policy.admit(NodeTerms(task="mean"))


def test_the_simulation_policy_allows_everything_and_keeps_no_ledger() -> None:
    sim = NodePolicy.simulation()
    assert sim.in_simulation and all(sim.allows(s) for s in ("keyed-noise", "no-noise", "attacks"))
    sim.admit(_terms(perturbation="none", attack="sign-flip", model="os.path:join"))
    assert not NodePolicy.default().in_simulation and not NodePolicy.default().allows("keyed-noise")
    with pytest.raises(ValueError, match="switch must be one of"):
        sim.allows("everything")
