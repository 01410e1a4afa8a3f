"""``fedpriv reproduce``: every entry runs at the tiny scale; the judges can say both verdicts; the page and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulations.cli import app
from simulations.reproduce import (
    ENTRIES,
    SCALES,
    VERDICTS,
    Entry,
    Scale,
    Verdict,
    hdr4me,
    judging,
    run_entry,
    write_page,
)

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("reproduce")
    return {name: run_entry(entry, "tiny", out) for name, entry in ENTRIES.items()}


@pytest.mark.slow(reason="the module fixture runs every entry at the tiny scale, one after another")
@pytest.mark.parametrize("name", list(ENTRIES))
def test_every_entry_runs_at_the_tiny_scale_and_records_its_verdict(outcomes: dict, name: str) -> None:
    outcome = outcomes[name]
    entry = ENTRIES[name]
    assert len(outcome.rows) == len(entry.scale("tiny").cells())
    record = json.loads(outcome.result.read_text(encoding="utf-8"))
    assert record["verdict"] in VERDICTS and record["evidence"]
    assert record["command"] == f"fedpriv reproduce {name} --scale tiny"
    assert record["claim"] == entry.claim and record["reduced"] == entry.reduced
    assert [r["cell"] for r in record["rows"]] == [r["cell"] for r in outcome.rows]
    assert all(math.isfinite(r[c]) for r in record["rows"] for c in entry.columns if isinstance(r[c], float))
    assert outcome.plot.read_bytes()[:8] == PNG


def _row(mechanism: str, epsilon: float, d: int, none: float, l1: float, l2: float, star: float,
         se: float = 0.0, predicted: float | None = None) -> dict[str, object]:
    return {"mechanism": mechanism, "epsilon": epsilon, "d": d, "mse_none": none, "mse_l1": l1, "mse_l2": l2,
            "mse_hdr4me*": star, "se_none": se, "se_l1": se, "se_l2": se, "se_hdr4me*": se,
            "predicted_mse": none if predicted is None else predicted}


def test_budget_judge_needs_both_the_sharp_cut_and_l2s_growing_edge() -> None:
    holds = [_row("laplace", 0.1, 100, 100.0, 2.0, 0.3, 1.0), _row("laplace", 3.2, 100, 0.2, 0.05, 0.06, 0.1)]
    assert hdr4me._judge_budget(holds).verdict == "reproduced"
    weak_cut = [_row("laplace", 0.1, 100, 100.0, 60.0, 0.3, 1.0), holds[1]]
    assert hdr4me._judge_budget(weak_cut).verdict == "not reproduced"
    no_trend = [_row("laplace", 0.1, 100, 100.0, 2.0, 3.0, 1.0), _row("laplace", 3.2, 100, 0.2, 0.1, 0.05, 0.1)]
    assert hdr4me._judge_budget(no_trend).verdict == "not reproduced"


def test_dimension_judge_needs_l2_falling_relative_to_naive() -> None:
    holds = [_row("piecewise", 0.8, 50, 1.0, 0.5, 0.4, 0.6), _row("piecewise", 0.8, 800, 40.0, 2.0, 0.4, 1.0)]
    assert hdr4me._judge_dims(holds).verdict == "reproduced"
    rising = [holds[0], _row("piecewise", 0.8, 800, 1.0, 0.9, 0.95, 1.0)]
    assert hdr4me._judge_dims(rising).verdict == "not reproduced"


def test_square_wave_judge_fails_when_recalibration_helps_a_lot_or_star_leaves_naive() -> None:
    holds = [_row("square_wave", 0.1, 100, 0.08, 0.08, 0.081, 0.0801), _row("square_wave", 1e3, 100, 1e-3, 4e-3, 3e-3, 1e-3)]
    assert hdr4me._judge_square_wave(holds).verdict == "reproduced"
    helps = [_row("square_wave", 0.1, 100, 0.08, 0.01, 0.081, 0.0801)]
    assert hdr4me._judge_square_wave(helps).verdict == "not reproduced"
    star_off = [_row("square_wave", 0.1, 100, 0.08, 0.08, 0.081, 0.09)]
    assert hdr4me._judge_square_wave(star_off).verdict == "not reproduced"


def test_star_judge_allows_two_standard_errors_and_no_more() -> None:
    # HDR4ME* 0.33 vs the best (L2) 0.30, SE 0.01 each: 2·√2·0.01 = 0.028 < 0.03 → worse
    assert hdr4me._judge_star([_row("laplace", 0.1, 100, 1.0, 0.5, 0.30, 0.33, se=0.01)]).verdict == "not reproduced"
    assert hdr4me._judge_star([_row("laplace", 0.1, 100, 1.0, 0.5, 0.30, 0.32, se=0.01)]).verdict == "reproduced"


def test_analyzer_judge_is_a_t_test_at_three_sigma_coverage() -> None:
    # 10 repetitions: Student's t critical value at 1 − 0.00135 with 9 dof is 4.094 (scipy), so 4.0 SE passes, 4.2 fails
    def row(realized: float) -> dict[str, object]:
        return {**_row("laplace", 1.0, 100, realized, 0, 0, 0, se=0.1, predicted=10.0), "repetitions": 10}

    assert hdr4me._judge_analyzer([row(10.40)]).verdict == "reproduced"
    assert hdr4me._judge_analyzer([row(10.42)]).verdict == "not reproduced"
    assert hdr4me._judge_analyzer([row(9.58)]).verdict == "not reproduced"


def test_scale_cells_are_the_grid_product_last_axis_fastest() -> None:
    cells = Scale({"task": "mean"}, {"a": (1, 2), "b": ("x", "y")}).cells()
    assert [(c["a"], c["b"]) for c in cells] == [(1, "x"), (1, "y"), (2, "x"), (2, "y")]
    assert all(c["task"] == "mean" for c in cells)
    with pytest.raises(ValueError, match="grid axis 'a'"):
        Scale({}, {"a": ()}).cells()


def test_an_entry_must_define_every_scale_and_a_verdict_must_be_known() -> None:
    entry = next(iter(ENTRIES.values()))
    with pytest.raises(ValueError, match="must define every scale"):
        Entry(name="x", source="s", chapter="c", claim="c", reduced="r", scales={"small": entry.scale("small")},
              judge=entry.judge, plot=entry.plot)
    with pytest.raises(ValueError, match="verdict must be one of"):
        Verdict("probably", "")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scale must be one of tiny, small, full"):
        entry.scale("huge")


@pytest.mark.slow(reason="the module fixture runs every entry at the tiny scale, one after another")
def test_the_page_lists_every_entry_with_its_verdict_and_plot(outcomes: dict, tmp_path: Path) -> None:
    records = [json.loads(o.result.read_text(encoding="utf-8")) for o in outcomes.values()]
    page = write_page(records, [o.plot for o in outcomes.values()], tmp_path / "results_page.txt",
                      command="fedpriv reproduce all --scale tiny", when="today")
    text = page.read_text(encoding="utf-8")
    for name, o in outcomes.items():
        assert f"## {name}" in text and f"**Verdict: {o.verdict.verdict}.**" in text
        assert (tmp_path / "img" / "reproductions" / o.plot.name).read_bytes()[:8] == PNG
        assert f"](img/reproductions/{o.plot.name})" in text


def test_cli_lists_every_entry_and_refuses_bad_names_and_scales() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["reproduce", "--list"], env={"COLUMNS": "400"})
    assert listed.exit_code == 0, listed.output
    assert all(name in listed.output for name in ENTRIES)
    bad_scale = runner.invoke(app, ["reproduce", "hdr4me-star", "--scale", "huge"], env={"COLUMNS": "400"})
    assert bad_scale.exit_code == 2 and "--scale must be one of " + ", ".join(SCALES) in bad_scale.output
    unknown = runner.invoke(app, ["reproduce", "figure-99"], env={"COLUMNS": "400"})
    assert unknown.exit_code == 2 and "no reproduction named 'figure-99'" in unknown.output


def test_cli_runs_one_entry_and_writes_the_page(tmp_path: Path) -> None:
    page = tmp_path / "page.txt"
    result = CliRunner().invoke(app, ["reproduce", "clt-framework-validation", "--scale", "tiny", "--out",
                                      str(tmp_path / "out"), "--page", str(page)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "tiny" / "clt-framework-validation" / "result.json").exists()
    assert "## clt-framework-validation" in page.read_text(encoding="utf-8")


def test_lowest_allows_ties_within_two_standard_errors_only() -> None:
    judge = judging.lowest("w1", "method", "a")
    rows = [{"method": "a", "epsilon": 1, "w1": 1.10, "w1_se": 0.03}, {"method": "b", "epsilon": 1, "w1": 1.0,
                                                                        "w1_se": 0.04}]
    assert judge(rows).verdict == "reproduced"  # 0.10 ≤ 2·0.05
    rows[0]["w1"] = 1.11
    assert judge(rows).verdict == "not reproduced"
    assert judge([rows[0]]).verdict == "not reproduced"  # no competitor: nothing shown


def test_beats_needs_a_margin_of_two_standard_errors_from_std_over_root_repetitions() -> None:
    judge = judging.beats("err", "method", "a", "b", panels=("S",))
    a = {"method": "a", "S": 4, "epsilon": 1, "err": 0.5, "err_std": 0.2, "repetitions": 4}
    b = {"method": "b", "S": 4, "epsilon": 1, "err": 0.78, "err_std": 0.2, "repetitions": 4}
    # SE = 0.2/√4 = 0.1 each, margin 2·√2·0.1 = 0.283: a gap of 0.28 is not enough, 0.29 is
    assert judge([a, b]).verdict == "not reproduced"
    b["err"] = 0.79
    assert judge([a, b]).verdict == "reproduced"
    assert judge([a]).verdict == "not reproduced"  # no pair


def test_monotone_reads_the_two_ends_per_group() -> None:
    up = judging.monotone("err", "d", increasing=True, group="m")
    rows = [{"m": "x", "d": 5, "err": 1.0}, {"m": "x", "d": 20, "err": 3.0}, {"m": "y", "d": 5, "err": 1.0},
            {"m": "y", "d": 20, "err": 0.9}]
    assert up(rows[:2]).verdict == "reproduced"
    assert up(rows).verdict == "not reproduced"
    assert judging.monotone("err", "d", increasing=False)(rows[2:]).verdict == "reproduced"
