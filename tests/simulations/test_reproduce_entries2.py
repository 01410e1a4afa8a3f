"""The judges of the MF (thesis ch. 4) and vertical k-means (thesis ch. 5) reproductions say both verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from simulations.reproduce import ENTRIES, judging, mf, vertical_kmeans


def _mf_row(cell: str, *, step: float = 0.001, train: float = 1.0, test: float = 1.0, before: float | None = None,
            **values: Any) -> dict[str, Any]:
    """A comparison row of the MF task with the keys the MF judges read."""
    return {"cell": f"{cell} mf-step-size={step}", "step_size": step, "train_mse": train, "test_mse": test,
            "test_mse_before_finetune": test if before is None else before, **values}


def _verdict(name: str, rows: list[dict[str, Any]]) -> str:
    return ENTRIES[name].judge(rows).verdict


def test_highest_is_the_mirror_of_lowest() -> None:
    rows = [{"method": "a", "epsilon": 1.0, "v": 0.9}, {"method": "b", "epsilon": 1.0, "v": 0.5}]
    assert judging.highest("v", "method", "a")(rows).verdict == "reproduced"
    assert judging.highest("v", "method", "b")(rows).verdict == "not reproduced"
    assert judging.lowest("v", "method", "b")(rows).verdict == "reproduced"
    # a tie within 2 combined SE is allowed: 0.5 ± 0.3 against 0.9 ± 0
    tied = [{**rows[0]}, {**rows[1], "v_se": 0.3}]
    assert judging.highest("v", "method", "b")(tied).verdict == "reproduced"


def test_metric_lines_put_the_panel_values_in_the_label() -> None:
    rows = [{"s": s, "m": m, "epsilon": e, "y": s * e} for s in (2, 4) for m in ("a",) for e in (2.0, 1.0)]
    series = judging.metric_lines("y", "epsilon", "m", panels=("s",))(rows)
    assert series == {"s=2 a": ([1.0, 2.0], [2.0, 4.0]), "s=4 a": ([1.0, 2.0], [4.0, 8.0])}


def test_tuning_keeps_the_step_of_the_lowest_training_mse_per_cell() -> None:
    rows = [_mf_row("mf-algorithm=a", step=0.001, train=0.5, test=0.9, algorithm="a", epsilon=1.0),
            _mf_row("mf-algorithm=a", step=0.01, train=float("nan"), test=0.1, algorithm="a", epsilon=1.0),
            _mf_row("mf-algorithm=b", step=0.001, train=0.7, test=0.8, algorithm="b", epsilon=1.0),
            _mf_row("mf-algorithm=b", step=0.01, train=0.6, test=0.95, algorithm="b", epsilon=1.0)]
    # a's diverged step (NaN training MSE) never wins although its test MSE is the lowest; b keeps 0.01
    judge = mf.tuned(judging.lowest("test_mse", "algorithm", "b"))
    verdict = judge(rows)
    assert verdict.verdict == "not reproduced" and "b 0.95" in verdict.evidence and "a 0.9" in verdict.evidence
    assert "mf-algorithm=a: β = 0.001" in verdict.evidence and "mf-algorithm=b: β = 0.01" in verdict.evidence
    assert mf.tuned(judging.lowest("test_mse", "algorithm", "a"))(rows).verdict == "reproduced"


def test_every_needs_every_judge() -> None:
    rows = [{"method": "a", "epsilon": 1.0, "x": 1.0, "y": 2.0}, {"method": "b", "epsilon": 1.0, "x": 2.0, "y": 1.0}]
    x, y = judging.lowest("x", "method", "a"), judging.lowest("y", "method", "a")
    assert judging.every(x, x)(rows).verdict == "reproduced"
    assert judging.every(x, y)(rows).verdict == "not reproduced"


def test_keyed_cells_take_the_extra_keys_of_their_axis_value() -> None:
    scale = mf.Keyed({"task": "mf"}, {"mf-algorithm": ("sgdmf", "objpert")}, axis="mf-algorithm",
                     extra={"objpert": {"mf-l2": 20.0}})
    assert scale.cells() == [{"task": "mf", "mf-algorithm": "sgdmf"},
                             {"task": "mf", "mf-algorithm": "objpert", "mf-l2": 20.0}]
    synsgd = ENTRIES["mf-hfl-synsgd"].scale("small").cells()
    assert {(c["mf-algorithm"], c["mf-rounds"], c["mf-local-steps"]) for c in synsgd} == {("sgdmf", 10, 4),
                                                                                          ("synsgd", 40, 1)}


@pytest.mark.parametrize(("embedding", "gradient", "verdict"), [(0.5, 0.9, "reproduced"), (0.9, 0.5, "not reproduced")])
def test_clipping_judge(embedding: float, gradient: float, verdict: str) -> None:
    rows = [_mf_row(f"mf-notion={n} mf-clip={c} epsilon=1.0", test=t, notion=n, clip=c, epsilon=1.0)
            for n in ("per-rating", "per-user") for c, t in (("embedding", embedding), ("gradient", gradient))]
    assert _verdict("mf-clipping", rows) == verdict


@pytest.mark.parametrize(("objpert", "verdict"), [(0.9, "reproduced"), (0.3, "not reproduced")])
def test_central_baselines_judge(objpert: float, verdict: str) -> None:
    rows = [_mf_row(f"mf-algorithm={a} epsilon=2.0", test=t, algorithm=a, epsilon=2.0)
            for a, t in (("sgdmf", 0.5), ("dp-sgld", 0.7), ("objpert", objpert))]
    assert _verdict("mf-central-baselines", rows) == verdict


@pytest.mark.parametrize(("before", "verdict"), [(0.6, "reproduced"), (0.9, "not reproduced")])
def test_hfl_pretrain_judge_needs_the_mse_before_and_after_fine_tuning(before: float, verdict: str) -> None:
    rows = [r for s in (2, 10) for r in (
        _mf_row(f"mf-parties={s} mf-algorithm=sgdmf", test=0.30, before=before, algorithm="sgdmf", parties=s),
        _mf_row(f"mf-parties={s} mf-algorithm=train-both", test=0.32, before=0.8, algorithm="train-both", parties=s))]
    assert _verdict("mf-hfl-pretrain", rows) == verdict


@pytest.mark.parametrize(("after", "verdict"), [(0.30, "reproduced"), (0.35, "not reproduced")])
def test_hfl_synsgd_judge(after: float, verdict: str) -> None:
    rows = [r for s in (10, 40) for e in (1.0, 4.0) for r in (
        _mf_row(f"mf-parties={s} mf-algorithm=sgdmf epsilon={e}", test=after, before=0.6, algorithm="sgdmf",
                parties=s, epsilon=e),
        _mf_row(f"mf-parties={s} mf-algorithm=synsgd epsilon={e}", test=0.32, before=0.9, algorithm="synsgd",
                parties=s, epsilon=e))]
    assert _verdict("mf-hfl-synsgd", rows) == verdict


@pytest.mark.parametrize(("sgdmf", "verdict"), [(0.6, "reproduced"), (0.8, "not reproduced")])
def test_lfl_judge_compares_with_the_noiseless_stage1_rows_at_their_cells_epsilon(sgdmf: float, verdict: str) -> None:
    # Stage 1 only adds no noise: its row's ε is None, its cell's is the grid value
    rows = [{"cell": f"mf-algorithm={a} dropout-rate=0.2 epsilon=1.0", "algorithm": a, "dropout_rate": 0.2,
             "epsilon": None if a == "stage1-only" else 1.0, "test_mse": t}
            for a, t in (("sgdmf", sgdmf), ("stage1-only", 0.7), ("ldp-noise", 0.9))]
    judged = ENTRIES["mf-lfl"].judge(rows)
    assert judged.verdict == verdict and "best other stage1-only 0.7" in judged.evidence


def _vk_row(method: str, value: float, std: float = 0.0, **values: Any) -> dict[str, Any]:
    return {"method": method, "cost_ratio": value, "cost_ratio_std": std, "v_measure": value, "v_measure_std": std,
            "repetitions": 3, **values}


@pytest.mark.parametrize(("mine", "verdict"), [(0.95, "reproduced"), (0.6, "not reproduced")])
def test_vmeasure_judge_wants_the_highest(mine: float, verdict: str) -> None:
    rows = [_vk_row(m, v, parties=s, epsilon=1.0) for s in (2, 4)
            for m, v in (("dpfmps-2pest", mine), ("ind-lap", 0.8), ("ldp-agg-2pest", 0.7))]
    assert _verdict("vkmeans-vmeasure", rows) == verdict


@pytest.mark.parametrize(("mine", "verdict"), [(5.0, "reproduced"), (30.0, "not reproduced")])
def test_uneven_split_judge(mine: float, verdict: str) -> None:
    rows = [_vk_row(m, v, widths=w, epsilon=2.0) for w in ("4:4", "3:5", "2:6")
            for m, v in (("dpfmps-2pest", mine), ("ind-lap", 20.0), ("ldp-agg-2pest", 25.0))]
    assert _verdict("vkmeans-uneven-split", rows) == verdict


@pytest.mark.parametrize(("mine", "std", "verdict"), [(5.0, 0.0, "reproduced"), (21.0, 0.1, "not reproduced"),
                                                      (21.0, 3.0, "reproduced")])
def test_parties_judge_allows_ties_within_two_standard_errors(mine: float, std: float, verdict: str) -> None:
    rows = [_vk_row(m, v, std, parties=s) for s in (2, 4, 8)
            for m, v in (("dpfmps-2pest", mine), ("ind-lap", 20.0), ("ldp-agg-2pest", 25.0))]
    assert _verdict("vkmeans-parties", rows) == verdict


def _kprime_rows(table: dict[tuple[int, float], int], parties: int = 2) -> list[dict[str, Any]]:
    return [{"parties": parties, "n": n, "epsilon": e, "kprime_requested": str(k), "kprime": f"{k}:{k}"}
            for (n, e), k in table.items()]


def test_kprime_judge_holds_for_a_table_that_grows_with_epsilon_and_n() -> None:
    table = {(20_000, 0.5): 4, (20_000, 4.0): 6, (60_000, 0.5): 5, (60_000, 4.0): 6}
    assert _verdict("vkmeans-kprime", _kprime_rows(table) + _kprime_rows(table, 4)) == "reproduced"


@pytest.mark.parametrize("table", [
    {(20_000, 0.5): 6, (20_000, 4.0): 5, (60_000, 0.5): 6, (60_000, 4.0): 7},   # falls with ε at n = 20,000
    {(20_000, 0.5): 5, (20_000, 4.0): 6, (60_000, 0.5): 4, (60_000, 4.0): 6},   # falls with n at ε = 0.5
    {(20_000, 0.5): 5, (20_000, 4.0): 5, (60_000, 0.5): 5, (60_000, 4.0): 5},   # flat: never larger
    {(20_000, 0.5): 2, (20_000, 4.0): 4, (60_000, 0.5): 3, (60_000, 4.0): 5},   # below ⌈5^(1/2)⌉ = 3
])
def test_kprime_judge_says_not_reproduced(table: dict[tuple[int, float], int]) -> None:
    assert _verdict("vkmeans-kprime", _kprime_rows(table)) == "not reproduced"


def test_the_entries_are_registered_once_with_every_scale() -> None:
    names = [e.name for e in (*mf.ENTRIES, *vertical_kmeans.ENTRIES)]
    assert len(names) == len(set(names)) == 9 and all(ENTRIES[n] is e for n, e in zip(
        names, (*mf.ENTRIES, *vertical_kmeans.ENTRIES), strict=True))
