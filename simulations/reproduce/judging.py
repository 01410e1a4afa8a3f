"""Judges shared by the reproductions: "A is lowest", "A beats B", "a metric moves one way along a sweep"."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from simulations.reproduce.entry import Rows, Series, Verdict, grouped

__all__ = ["beats", "every", "highest", "lowest", "metric_lines", "monotone"]


def _se(row: Mapping[str, Any], metric: str) -> float:
    """The standard error of ``metric`` in ``row``: ``<metric>_se``, else ``<metric>_std`` / √repetitions, else 0."""
    value = row.get(f"{metric}_se")
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    std, reps = row.get(f"{metric}_std"), row.get("repetitions")
    if isinstance(std, (int, float)) and math.isfinite(std) and isinstance(reps, int) and reps > 0:
        return float(std) / math.sqrt(reps)
    return 0.0


def _cells(rows: Rows, panels: Sequence[str], by: str) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    """The rows grouped by their panel values and ``by``, in the order they first appear."""
    cells: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        cells.setdefault(tuple(r[p] for p in panels) + (r[by],), []).append(r)
    return cells


def _label(panels: Sequence[str], by: str, where: tuple[Any, ...]) -> str:
    """A cell's place in words: ``panel = value, …, by = value``."""
    return ", ".join(f"{k} = {v}" for k, v in zip((*panels, by), where, strict=True))


def lowest(metric: str, method_key: str, winner: str, *, by: str = "epsilon", panels: Sequence[str] = ()
           ) -> Callable[[Rows], Verdict]:
    """``winner`` has the lowest ``metric`` at every value of ``by`` (in each panel), ties within 2 combined SE allowed."""
    return _best(metric, method_key, winner, by=by, panels=panels, higher=False)


def highest(metric: str, method_key: str, winner: str, *, by: str = "epsilon", panels: Sequence[str] = ()
            ) -> Callable[[Rows], Verdict]:
    """``winner`` has the highest ``metric`` at every value of ``by`` (in each panel), ties within 2 combined SE allowed."""
    return _best(metric, method_key, winner, by=by, panels=panels, higher=True)


def _best(metric: str, method_key: str, winner: str, *, by: str, panels: Sequence[str], higher: bool
          ) -> Callable[[Rows], Verdict]:
    """The judge of :func:`lowest` (``higher`` False) and :func:`highest` (``higher`` True)."""
    sign = -1.0 if higher else 1.0

    def judge(rows: Rows) -> Verdict:
        lost, lines = [], []
        for where, rs in _cells(rows, panels, by).items():
            mine = next((r for r in rs if r[method_key] == winner), None)
            others = [r for r in rs if r[method_key] != winner and r.get(metric) is not None]
            if mine is None or not others:
                continue
            best = min(others, key=lambda r: sign * r[metric])
            margin = 2 * math.hypot(_se(mine, metric), _se(best, metric))
            label = _label(panels, by, where)
            lines.append(f"{label}: {winner} {mine[metric]:.4g}, best other {best[method_key]} {best[metric]:.4g}")
            if sign * mine[metric] > sign * best[metric] + margin:
                lost.append(label)
        if not lines:
            return Verdict("not reproduced", f"no cell holds {winner} and another method")
        head = (f"{winner} is beaten by more than 2 SE at " + "; ".join(lost) + ". ") if lost else ""
        return Verdict("not reproduced" if lost else "reproduced", head + "; ".join(lines))

    return judge


def beats(metric: str, method_key: str, winner: str, loser: str, *, by: str = "epsilon",
          panels: Sequence[str] = ()) -> Callable[[Rows], Verdict]:
    """``winner``'s ``metric`` below ``loser``'s at every value of ``by`` (in each panel), by more than 2 combined SE."""

    def judge(rows: Rows) -> Verdict:
        lines, failed = [], []
        for where, rs in _cells(rows, panels, by).items():
            pair = {r[method_key]: r for r in rs if r[method_key] in (winner, loser)}
            if len(pair) < 2:
                continue
            w, lo = pair[winner], pair[loser]
            margin = 2 * math.hypot(_se(w, metric), _se(lo, metric))
            label = _label(panels, by, where)
            ok = w[metric] < lo[metric] - margin
            lines.append(f"{label}: {winner} {w[metric]:.4g} vs {loser} {lo[metric]:.4g}"
                         + ("" if ok else " (not lower by 2 SE)"))
            failed += [] if ok else [label]
        if not lines:
            return Verdict("not reproduced", f"no cell holds both {winner} and {loser}")
        return Verdict("not reproduced" if failed else "reproduced", "; ".join(lines))

    return judge


def monotone(metric: str, by: str, *, increasing: bool, group: str | None = None) -> Callable[[Rows], Verdict]:
    """``metric`` grows (or falls) from the smallest to the largest ``by`` in every group, beyond 2 combined SE."""

    def judge(rows: Rows) -> Verdict:
        groups = grouped(rows, by, group) if group else {"all": sorted(rows, key=lambda r: r[by])}
        lines, failed = [], []
        for g, rs in groups.items():
            first, last = rs[0], rs[-1]
            margin = 2 * math.hypot(_se(first, metric), _se(last, metric))
            change = last[metric] - first[metric]
            ok = change > margin if increasing else change < -margin
            lines.append(f"{'' if g == 'all' else f'{g}: '}{metric} {first[metric]:.4g} at {by} = {first[by]} → "
                         f"{last[metric]:.4g} at {by} = {last[by]}" + ("" if ok else " (not beyond 2 SE)"))
            failed += [] if ok else [str(g)]
        return Verdict("not reproduced" if failed else "reproduced", "; ".join(lines))

    return judge


def every(*judges: Callable[[Rows], Verdict]) -> Callable[[Rows], Verdict]:
    """Reproduced only if every judge says so; the evidence of each, in order, joined by ``|``."""

    def judge(rows: Rows) -> Verdict:
        verdicts = [j(rows) for j in judges]
        ok = all(v.verdict == "reproduced" for v in verdicts)
        return Verdict("reproduced" if ok else "not reproduced", " | ".join(v.evidence for v in verdicts))

    return judge


def metric_lines(metric: str, by: str, group: str, *, panels: Sequence[str] = ()) -> Callable[[Rows], Series]:
    """One line of ``metric`` against ``by`` per value of ``group`` (per panel: the ``panels`` keys' values lead the label)."""

    def series(rows: Rows) -> Series:
        keyed = [{**r, "_line": " ".join([*(f"{p}={r[p]}" for p in panels), str(r[group])])} for r in rows]
        return {str(g): ([float(r[by]) for r in rs], [float(r[metric]) for r in rs])
                for g, rs in grouped(keyed, by, "_line").items()}

    return series
