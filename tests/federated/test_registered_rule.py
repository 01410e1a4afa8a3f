"""An aggregation rule and a mechanism of one's own, registered from outside the package (docs/architecture.md, "Registries").

``PlainMean`` is the unweighted mean of the uploads: FedAvg with ``weights = uniform``. Registered
under its own name it must be a valid ``strategy`` everywhere (the key, ``aggregate``, the runs)
and give exactly FedAvg-uniform's model in process and under Flower's simulation engine.
``twin-laplace`` is the Laplace mechanism under another name: a run with it must equal the run
with ``laplace``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedpriv.config import RunConfig
from fedpriv.federated.aggregate import AGGREGATORS, aggregate, assumption_violation
from fedpriv.federated.rules import AggregationRule, Parameter, register_rule, unregister_rule
from fedpriv.keys import Key, positive
from fedpriv.mechanisms import MECHANISMS, LaplaceMechanism, get_mechanism, register_mechanism
from simulations.runner import run


class PlainMean(AggregationRule):
    """``scale`` times the unweighted mean of the uploads; assumes no attacker."""

    name = "plainmean"
    summary = "unweighted mean (a test rule)"
    colour = "black"
    parameters = {"plain_scale": Parameter("plain-scale", Key(1.0, float, "scale of the mean", check=positive,
                                                               allowed="> 0"),
                                           lambda v, kw: float(v) if float(v) > 0 else (_ for _ in ()).throw(
                                               ValueError(f"{kw} must be > 0, got {v!r}")))}

    def violation(self, k: int, f: int, params: Mapping[str, Any]) -> str | None:
        return None if f == 0 else f"{self.name} defends against no attacker, got num-malicious={f}"

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        return params["plain_scale"] * updates.mean(axis=0)


def twin_laplace(epsilon: float, *, abs3_form: str = "correct") -> LaplaceMechanism:
    """The Laplace mechanism under another name."""
    return LaplaceMechanism(epsilon, abs3_form=abs3_form)


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    register_rule(PlainMean())
    register_mechanism("twin-laplace", twin_laplace)
    yield
    unregister_rule("plainmean")
    MECHANISMS.unregister("twin-laplace")


def test_the_names_are_allowed_everywhere_while_registered() -> None:
    assert "plainmean" in AGGREGATORS and "twin-laplace" in MECHANISMS
    cfg = RunConfig.from_mapping({"strategy": "plainmean", "mechanism": "twin-laplace"})
    assert cfg["strategy"] == "plainmean"
    unregister_rule("plainmean")
    try:
        assert "plainmean" not in AGGREGATORS
        with pytest.raises(ValueError, match="strategy must be one of 'fedavg'.*got 'plainmean'"):
            RunConfig.from_mapping({"strategy": "plainmean"})
    finally:
        register_rule(PlainMean())


def test_aggregate_runs_the_rule_with_its_parameter_and_assumption() -> None:
    u = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 50.0]])
    np.testing.assert_array_equal(aggregate(u, np.array([1.0, 1.0, 5.0]), "plainmean"), u.mean(axis=0))
    np.testing.assert_array_equal(aggregate(u, np.ones(3), "plainmean", plain_scale=2.0), 2.0 * u.mean(axis=0))
    with pytest.raises(ValueError, match="plain_scale must be > 0"):
        aggregate(u, np.ones(3), "plainmean", plain_scale=-1.0)
    assert assumption_violation("plainmean", 3, 1) == "plainmean defends against no attacker, got num-malicious=1"
    with pytest.raises(ValueError, match="defends against no attacker"):
        aggregate(u, np.ones(3), "plainmean", num_malicious=1)


def test_registering_refuses_a_taken_name_a_wrong_object_and_a_builtin_removal() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_rule(PlainMean())
    with pytest.raises(TypeError, match="must be an AggregationRule instance"):
        register_rule(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="built-in aggregation rule"):
        unregister_rule("fedavg")
    with pytest.raises(TypeError, match="Mechanism class or a function of \\(epsilon"):
        register_mechanism("bad", lambda scale: scale)  # type: ignore[arg-type,return-value]


def test_the_mechanism_is_built_by_name() -> None:
    m = get_mechanism("twin-laplace", 1.0)
    assert isinstance(m, LaplaceMechanism) and m.guarantee.epsilon == 1.0


LDP_SGD = {"num-clients": 4, "rounds": 2, "local-steps": 2, "batch-size": 8, "noise-schedule": "last_step",
           "perturbation": "coordinatewise", "epsilon": 5.0}


def test_an_ldp_sgd_run_with_the_rule_equals_fedavg_with_uniform_weights(tmp_path: Path) -> None:
    mine = run(RunConfig.from_mapping({**LDP_SGD, "strategy": "plainmean"}), root=tmp_path / "mine")
    fedavg = run(RunConfig.from_mapping({**LDP_SGD, "weights": "uniform"}), root=tmp_path / "fedavg")
    np.testing.assert_array_equal(mine.params, fedavg.params)


def test_a_mean_run_with_the_mechanism_equals_the_laplace_run(tmp_path: Path) -> None:
    base = {"task": "mean", "num-clients": 50, "repetitions": 2}
    mine = run(RunConfig.from_mapping({**base, "mechanism": "twin-laplace"}), root=tmp_path / "mine")
    laplace = run(RunConfig.from_mapping({**base, "mechanism": "laplace"}), root=tmp_path / "laplace")
    assert [r["mse"] for r in mine.rounds] == [r["mse"] for r in laplace.rounds]


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
@pytest.mark.subprocess
def test_under_flower_the_rule_and_the_mechanism_give_the_in_process_run(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({**LDP_SGD, "strategy": "plainmean", "mechanism": "twin-laplace"})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")  # the engine whose bits Flower's must match
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["status"] == "finished", flower.summary["error"]
    np.testing.assert_array_equal(flower.params, fast.params)
    reference = run(RunConfig.from_mapping({**LDP_SGD, "weights": "uniform", "mechanism": "laplace"}), engine="fast",
                    root=tmp_path / "reference")
    np.testing.assert_array_equal(fast.params, reference.params)
