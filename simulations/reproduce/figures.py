"""The two figure kinds of the reproductions: lines over a swept parameter, and grouped bars."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from fedpriv.plots import plot_bars, plot_lines
from simulations.reproduce.entry import Rows, Series

__all__ = ["bars", "lines"]


def lines(series: Callable[[Rows], Series], *, xlabel: str, ylabel: str) -> Callable[[Rows, Path, str], Path]:
    """A plot of one line per label of ``series(rows)`` (:func:`fedpriv.plots.plot_lines`)."""

    def plot(rows: Rows, path: Path, title: str) -> Path:
        return plot_lines(series(rows), path, xlabel=xlabel, ylabel=ylabel, title=title)

    return plot


def bars(groups: Callable[[Rows], Mapping[str, Mapping[str, tuple[float, float]]]], *, ylabel: str
         ) -> Callable[[Rows, Path, str], Path]:
    """A grouped bar chart of ``groups(rows)``: group → bar label → (value, error bar) (:func:`fedpriv.plots.plot_bars`)."""

    def plot(rows: Rows, path: Path, title: str) -> Path:
        return plot_bars(groups(rows), path, ylabel=ylabel, title=title)

    return plot
