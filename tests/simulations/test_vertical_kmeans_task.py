"""task = "vertical-kmeans": run directory, the parties' key, resume, errors, CLI, Flower (the protocol against the core's
functions: tests/workloads/test_vertical_kmeans_protocol.py)."""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv.clustering.dplsf import PRESETS
from fedpriv.clustering.kmeans import assign, kmeans
from fedpriv.clustering.kprime import KPRIME_RULES
from fedpriv.clustering.vertical import (
    METHODS,
    VerticalKMeansConfig,
    budget_for,
    evaluate,
    privacy_record,
    server_kprime,
    server_rng,
)
from fedpriv.clustering.weights import UPDATES
from fedpriv.config import KEYS, RunConfig
from fedpriv.data.vertical import VERTICAL_DATASETS, load_vertical
from fedpriv.sketch.estimator import ESTIMATORS
from fedpriv.sketch.hashing import HASH_BACKENDS
from fedpriv.workloads import get_workload, names
from fedpriv.workloads.vertical_kmeans import party_key
from fedpriv.workloads.vertical_kmeans.data import VerticalKMeansView, kmeans_config
from fedpriv.workloads.vertical_kmeans.party_key import PartyKey
from fedpriv.workloads.vertical_kmeans.report import PRIVACY_SCOPE
from simulations.cli import app
from simulations.compare import default_cells
from simulations.runner import run

SMALL = {"task": "vertical-kmeans", "kmeans-samples": 1500, "sketch-repetitions": 128, "repetitions": 3,
         "epsilon": 2.0, "seed": 2}
RECORD_KEYS = {"round", "seed", "method", "epsilon", "parties", "kprime", "kprime-requested", "n-hat", "cost",
               "cost-ratio", "v-measure", "relative-error", "private", "epsilon-total", "delta-total", "seconds"}
CONFIGS = Path(__file__).resolve().parents[2] / "simulations" / "configs"
SECRET = bytes(range(50, 82))
WORKLOAD = get_workload("vertical-kmeans")
runner = CliRunner()


def _setup(values: dict):
    return WORKLOAD.setup(RunConfig.from_mapping(values))


@pytest.fixture
def fixed_key(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every run's parties' secret is SECRET; the list records one entry per secret drawn."""
    drawn: list[bytes] = []

    def secret() -> bytes:
        drawn.append(SECRET)
        return SECRET

    monkeypatch.setattr(party_key, "new_key_secret", secret)
    return drawn


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def test_run_writes_the_run_directory(tmp_path: Path, fixed_key: list[bytes]) -> None:
    config = RunConfig.from_mapping(SMALL)
    result = run(config, root=tmp_path)
    lines = [json.loads(line) for line in (result.directory / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3] and [r["seed"] for r in lines] == [2, 3, 4]
    assert all(set(r) == RECORD_KEYS for r in lines) and len(fixed_key) == 1  # one secret per run
    data, cfg = load_vertical("mixed-gaussian", 2, n=1500, seed=2), kmeans_config(VerticalKMeansView(config))
    for line in lines:  # repetition r runs with seed + r - 1; its privacy account is the §10 record at its n̂
        expected = privacy_record(cfg, budget_for(cfg, line["n-hat"], 2), 2)
        assert (line["epsilon-total"], line["delta-total"]) == (expected["epsilon"], expected["delta"])
        assert len(line["kprime"]) == 2 and all(1 <= k <= line["kprime-requested"] for k in line["kprime"])
        assert line["kprime-requested"] == server_kprime(cfg, line["n-hat"], 2)  # §8.2's rule at the run's n̂
        assert (line["method"], line["epsilon"], line["parties"], line["private"]) == ("dpfmps-2pest", 2.0, 2, True)
    m = evaluate(data, cfg, result.params, seed=lines[-1]["seed"])  # the §16 evaluation of the released centers
    assert (lines[-1]["cost"], lines[-1]["cost-ratio"], lines[-1]["v-measure"]) == (m["cost"], m["cost_ratio"],
                                                                                     m["v_measure"])
    summary = json.loads((result.directory / "summary.json").read_text())
    assert (summary["engine"], summary["task"], summary["status"], summary["rounds_finished"]) == (
        "fast", "vertical-kmeans", "finished", 3)
    assert summary["privacy_scope"] == PRIVACY_SCOPE and summary["privacy"]["epsilon"] == pytest.approx(2.0)
    assert summary["privacy"]["split"]["eps2"] == pytest.approx(0.98 * 2.0 / 4)
    assert {k: v for k, v in summary["privacy"].items() if k != "repetitions"} == expected
    assert "not composed" in summary["privacy"]["repetitions"]
    ratios = [r["cost-ratio"] for r in lines]
    assert summary["final"]["cost_ratio"] == {"mean": pytest.approx(np.mean(ratios)),
                                              "std": pytest.approx(np.std(ratios)), "count": 3}
    assert summary["data"] == {"name": "mixed-gaussian", "n": 1500, "m": 8, "widths": [4, 4], "parties": 2,
                               "labels": True}
    assert (result.directory / "cost-ratio.png").read_bytes()[:4] == b"\x89PNG"
    assert RunConfig.from_toml(result.directory / "config.toml") == config


def test_the_key_is_fresh_per_run_per_repetition_and_never_written(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[bytes] = []
    fresh = party_key.new_key_secret

    def secret() -> bytes:
        drawn.append(fresh())
        return drawn[-1]

    monkeypatch.setattr(party_key, "new_key_secret", secret)
    config = RunConfig.from_mapping(SMALL)
    results = [run(config, root=tmp_path / "a"), run(config, root=tmp_path / "b")]
    assert len(drawn) == 2 and len(set(drawn)) == 2 and all(len(s) == 32 for s in drawn)
    derived = [PartyKey(s).repetition_key(config.digest(), r) for s in drawn for r in (1, 2, 3)]
    assert len({k.fingerprint for k in derived}) == 6
    # fresh keys: the two runs' sketches differ, so their centers do (same seeds, same data)
    assert [r["cost"] for r in results[0].rounds] != [r["cost"] for r in results[1].rounds]
    for result in results:
        files = [p for p in result.directory.rglob("*") if p.is_file()]
        # every file of the run directory, the commit record (uncompressed npz) and the lock file included
        assert {p.name for p in files} == {"config.toml", "run.json", ".lock", "metrics.jsonl", "checkpoint.npz",
                                           "summary.json", "cost-ratio.png"}
        for path in files:
            blob = path.read_bytes()
            for s in (*drawn, *(k._secret for k in derived)):  # noqa: SLF001 - the bytes a leak would show
                assert s not in blob and s.hex().encode() not in blob
            for k in derived:
                assert k.fingerprint.encode() not in blob


class _Interrupt(Exception):
    """Stands for a crash after some repetitions."""


def test_resume_gives_what_an_uninterrupted_run_gives(tmp_path: Path, fixed_key: list[bytes]) -> None:
    cfg = RunConfig.from_mapping({**SMALL, "repetitions": 4})
    whole = run(cfg, root=tmp_path / "whole")

    def stop_after_two(record: dict) -> None:
        if record["round"] == 2:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        run(cfg, root=tmp_path / "part", on_progress=stop_after_two)
    (part,) = (tmp_path / "part").iterdir()
    assert len((part / "metrics.jsonl").read_text().splitlines()) == 2
    resumed = run(cfg, resume=part)
    assert _without_seconds(resumed.rounds) == _without_seconds(whole.rounds)
    assert [r["seed"] for r in resumed.rounds] == [2, 3, 4, 5]
    assert {k: v for k, v in resumed.summary["final"].items() if k != "seconds"} == {
        k: v for k, v in whole.summary["final"].items() if k != "seconds"}
    assert resumed.summary["privacy"] == whole.summary["privacy"]
    np.testing.assert_array_equal(resumed.params, whole.params)
    again = run(cfg, resume=part)  # nothing left to run: the summary keeps the last repetition's account
    assert again.summary["privacy"] == whole.summary["privacy"] and len(again.rounds) == 4


@pytest.mark.parametrize("values, engine, match", [
    ({"parties": 1}, "auto", "parties must be >= 2, got 1"),
    ({"k": 2000}, "auto", "k must be <= n = 1500 \\(kmeans-samples\\), got 2000"),
    ({"kmeans-data": "iris", "kmeans-samples": 0, "k": 200}, "auto", "k must be <= n = 150 .*got 200"),
    ({"kmeans-method": "kmeans++"}, "auto", "kmeans-method must be one of 'dpfmps-2pest', .*got 'kmeans\\+\\+'"),
    ({"split-ratios": "1:2:3"}, "auto", "split-ratios must hold 2 positive integers .*got '1:2:3'"),
    ({"split-ratios": "a:b"}, "auto", "split-ratios must look like '3:5'"),
    ({"split-ratios": "1:2"}, "auto", "ratios must divide the 8 columns exactly"),
    ({"parties": 9}, "auto", "parties must be <= kmeans-dims = 8"),
    ({"kprime": 3}, "auto", "kprime must be None unless kprime_rule='fixed'"),
    ({"budget-b": 1.0}, "auto", "b must be < 1 for method 'dpfmps-2pest'"),
    ({"epsilon": 100.0}, "auto", "eps2 = b\\*epsilon/\\(2\\*parties\\) must be <= 2\\*ln\\(1/delta2\\)"),
    ({"kmeans-data": "digits", "kmeans-csv": "x.csv"}, "auto", "kmeans-csv and kmeans-csv-label apply only"),
    ({"kmeans-data": "csv"}, "auto", "kmeans-csv must name a CSV file"),
    ({}, "batched", "engine must be one of 'fast', 'flower' \\(or 'auto'\\) for task = 'vertical-kmeans'"),
])
def test_bad_configs_fail_before_anything_is_written(tmp_path: Path, values: dict, engine: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run(RunConfig.from_mapping({**SMALL, **values}), engine=engine, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_config_keys_offer_exactly_what_the_core_accepts() -> None:
    for key, allowed in (("kmeans-method", METHODS), ("kmeans-data", VERTICAL_DATASETS),
                         ("hash-backend", HASH_BACKENDS), ("sketch-estimator", ESTIMATORS),
                         ("dplsf-preset", tuple(PRESETS)), ("kprime-rule", KPRIME_RULES),
                         ("twopest-update", UPDATES)):
        assert KEYS[key].choices == tuple(allowed), key
    assert "vertical-kmeans" in names()  # the allowed values of task are the registry's names
    cfg = _setup({**SMALL, "kmeans-delta": 1e-6, "kprime-rule": "fixed", "kprime": 4, "twopest-iterations": 50,
                  "budget-b": 0.9}).kmeans
    assert cfg == VerticalKMeansConfig(epsilon=2.0, delta=1e-6, kprime=4, kprime_rule="fixed", b=0.9, M=128,
                                       twopest_iterations=50)
    assert _setup(SMALL).kmeans == VerticalKMeansConfig(epsilon=2.0, M=128)


def test_the_data_follow_the_configuration() -> None:
    data = _setup(SMALL).data
    reference = load_vertical("mixed-gaussian", 2, n=1500, seed=2)  # m = 8, k = 5: load_vertical's own data
    for a, b in zip(data.blocks, reference.blocks, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(data.labels, reference.labels)
    uneven = _setup({**SMALL, "split-ratios": "3:5", "k": 3, "kmeans-dims": 16}).data
    assert uneven.widths == (6, 10) and set(np.unique(uneven.labels)) == {0, 1, 2}


def _truth(values: dict) -> np.ndarray:
    setup = _setup(values)
    return WORKLOAD.load_server(setup).labels


def test_ground_truth_is_central_kmeans_for_real_sets(tmp_path: Path) -> None:
    base = {**SMALL, "kmeans-data": "iris", "kmeans-samples": 0, "k": 3}
    x = load_vertical("iris", 2).x
    np.testing.assert_array_equal(_truth(base), assign(x, kmeans(x, 3, rng=server_rng(2, "ground-truth"))))
    np.testing.assert_array_equal(_truth({**base, "kmeans-truth": "labels"}), load_vertical("iris", 2).labels)
    central = _setup({**SMALL, "kmeans-truth": "central-kmeans"}).data
    np.testing.assert_array_equal(_truth({**SMALL, "kmeans-truth": "central-kmeans"}),
                                  assign(central.x, kmeans(central.x, 5, rng=server_rng(2, "ground-truth"))))
    np.testing.assert_array_equal(_truth(SMALL), _setup(SMALL).data.labels)  # auto: the generating components
    path = tmp_path / "points.csv"
    path.write_text("a,b,c\n" + "\n".join(f"{i % 7},{i % 5},{i % 3}" for i in range(40)) + "\n")
    csv_cfg = {**SMALL, "kmeans-data": "csv", "kmeans-csv": str(path), "kmeans-samples": 0, "k": 2}
    assert _truth(csv_cfg).shape == (40,)
    with pytest.raises(ValueError, match="kmeans-truth must be 'central-kmeans' or 'auto' for data without labels"):
        _setup({**csv_cfg, "kmeans-truth": "labels"})


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("vertical_kmeans_*.toml")), ids=lambda p: p.name)
def test_shipped_configs_build_their_setup(path: Path) -> None:
    setup = WORKLOAD.setup(RunConfig.from_toml(path))
    assert setup.repetitions >= 3 and setup.data.parties >= 2


def test_cli_run_prints_repetitions_and_privacy(tmp_path: Path) -> None:
    small = ["--set", "kmeans-samples=1500", "--set", "sketch-repetitions=128", "--set", "repetitions=2"]
    result = runner.invoke(app, ["run", str(CONFIGS / "vertical_kmeans_synthetic.toml"), *small, "--out",
                                 str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("Vertical k-means: dpfmps-2pest on mixed-gaussian (n=1500, m=8, S=2", "cost ratio", "V-measure",
                 "rel. error", "mean ± std over 2 repetitions", "(ε, δ) = (1, ", "ε_1 = ε_2 = 0.245 per party"):
        assert text in result.output, text
    bad = runner.invoke(app, ["run", str(CONFIGS / "vertical_kmeans_synthetic.toml"), "--set", "parties=1",
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "parties must be >= 2, got 1" in bad.output
    assert not (tmp_path / "bad").exists()


def test_cli_compare_grid_writes_one_row_per_cell(tmp_path: Path) -> None:
    small = ["--set", "kmeans-samples=1500", "--set", "sketch-repetitions=128", "--set", "repetitions=2"]
    result = runner.invoke(app, ["compare", str(CONFIGS / "vertical_kmeans_synthetic.toml"), *small,
                                 "--grid", "epsilon=1,4", "--grid", "kmeans-method=dpfmps-2pest,central-dplsf,vfl-kmeans",
                                 "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "loss ratio" in result.output and "V-measure" in result.output
    ldp = runner.invoke(app, ["run", str(CONFIGS / "vertical_kmeans_synthetic.toml"), *small, "--set",
                              "kmeans-method=ldp-agg-2pest", "--out", str(tmp_path / "ldp")], env={"COLUMNS": "200"})
    assert ldp.exit_code == 0 and "caveat: A7" in ldp.output, ldp.output
    with open(tmp_path / "comparison.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["method"], float(r["epsilon"])) for r in rows] == [
        (m, e) for e in (1.0, 4.0) for m in ("dpfmps-2pest", "central-dplsf", "vfl-kmeans")]
    assert {r["series"] for r in rows} == {"dpfmps-2pest", "central-dplsf", "vfl-kmeans"}
    by = {(r["method"], float(r["epsilon"])): r for r in rows}
    assert float(by["vfl-kmeans", 1.0]["epsilon_total"]) == float("inf")  # non-private: ε spent is infinite
    assert float(by["dpfmps-2pest", 4.0]["epsilon_total"]) == pytest.approx(4.0)
    assert by["central-dplsf", 1.0]["relative_error"] == "" and all(r["repetitions"] == "2" for r in rows)
    assert all((r["widths"], r["n"]) == ("4:4", "1500") for r in rows)
    # the k' the server asked for: one value for a vertical method, none for a central one
    assert by["dpfmps-2pest", 1.0]["kprime_requested"].isdigit() and by["central-dplsf", 1.0]["kprime_requested"] == ""
    for name in ("cost-ratio.png", "v-measure.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_default_sweep_is_methods_by_epsilon() -> None:
    cells = default_cells(RunConfig.from_mapping(SMALL))
    assert [(c.config["kmeans-method"], c.config.epsilon) for c in cells] == [
        (m, e) for m in ("dpfmps-2pest", "dpfmps-basic", "ind-lap", "ldp-agg-2pest", "central-dplsf")
        for e in (0.5, 1.0, 2.0, 4.0)]
    assert cells[0].label == "kmeans-method=dpfmps-2pest epsilon=0.5"
    assert all(c.config["kmeans-samples"] == 1500 for c in cells)


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
@pytest.mark.subprocess
def test_flower_engine_records_equal_the_fast_engines(tmp_path: Path, fixed_key: list[bytes]) -> None:
    before = set(Path(tempfile.gettempdir()).glob("fedpriv-node-secrets-*"))
    cfg = RunConfig.from_mapping({**SMALL, "kmeans-samples": 800, "sketch-repetitions": 256, "repetitions": 2})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["status"] == "finished" and flower.summary["engine"] == "flower"
    assert _without_seconds(flower.rounds) == _without_seconds(fast.rounds)
    np.testing.assert_array_equal(flower.params, fast.params)
    assert flower.summary["privacy"] == fast.summary["privacy"]
    assert len(fixed_key) == 2  # one secret per run: the Flower run's went to its parties in a key file
    assert set(Path(tempfile.gettempdir()).glob("fedpriv-node-secrets-*")) == before  # the key file is gone
    for path in (p for p in flower.directory.rglob("*") if p.is_file()):
        assert SECRET not in path.read_bytes()
