"""PNG plots of per-round metrics (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_rounds"]


def plot_rounds(
    series: Mapping[str, Sequence[Mapping[str, Any]]], key: str, path: Path, *, ylabel: str, title: str = ""
) -> Path:
    """One line per label: ``record[key]`` against ``record["round"]``; rounds missing the key are skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = len(series) > 1
    fig, ax = plt.subplots(figsize=(9.5 if many else 7.0, 4.4))
    colors = plt.cm.tab20.colors if len(series) > 10 else plt.cm.tab10.colors  # distinct colour per series
    for i, (label, records) in enumerate(series.items()):
        pts = [(r["round"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, markersize=3, label=label,
                    color=colors[i % len(colors)], linestyle="-" if i < len(colors) else "--")
    ax.set(xlabel="round", ylabel=ylabel, title=title or ylabel)
    ax.grid(alpha=0.3)
    if many:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
