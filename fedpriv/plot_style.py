"""The house style of fedpriv's PNG plots: figures on the Agg backend, colours, line styles, axes, titles, legends.

Every plot tells its series apart by colour and line style with the legend outside the axes; an
axis is logarithmic only where its values span at least a decade (:func:`scale_axis`); rounds,
iterations and repetitions get integer ticks. The plots themselves are :mod:`fedpriv.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["LINESTYLES", "MARKERS", "PALETTE", "scale_axis"]


def _figure(size: tuple[float, float], nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Any, Any]:
    """A new figure and axes (``nrows`` × ``ncols``, ``plt.subplots`` keywords) on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=size, **kwargs)


def _save(fig: Any, path: Path) -> Path:
    """Lay out, write a 120-dpi PNG and release the figure."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


#: Colours that stay distinct side by side (matplotlib's tab10 without its two greys' neighbour).
PALETTE: tuple[str, ...] = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
                            "tab:pink", "tab:olive", "tab:cyan", "tab:gray")
LINESTYLES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X")


def scale_axis(ax: Any, axis: str, values: Iterable[Any]) -> str:
    """Log scale on ``axis`` ("x" or "y") only when the finite values are all > 0 and span ≥ a decade; else linear.

    A log axis gets ticks at 1, 2 and 5 per decade (powers of ten only past three decades), written
    as plain numbers, so even a one-decade axis carries several readable labels. Returns the scale.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    vals = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    log = bool(vals) and min(vals) > 0 and max(vals) >= 10 * min(vals)
    target = ax.xaxis if axis == "x" else ax.yaxis
    if not log:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("linear")
        return "linear"
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    subs = (1.0,) if max(vals) > 1e3 * min(vals) else (1.0, 2.0, 5.0)
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())
    return "log"


def _null_formatter() -> Any:
    """No labels (for minor ticks)."""
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def _set_title(ax: Any, title: str, width: int) -> None:
    """The axes' title, each line wrapped at ``width`` characters so it stays inside the figure."""
    import textwrap

    ax.set_title("\n".join(textwrap.fill(line, width) for line in title.split("\n")), fontsize=10)


def _integer_ticks(ax: Any, axis: str = "x") -> None:
    """Ticks at whole numbers only (rounds, iterations, repetitions)."""
    from matplotlib.ticker import MaxNLocator

    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def _legend(ax: Any, *, outside: bool = True, fontsize: float = 8) -> None:
    """The legend, outside the axes on the right (or inside, for a few short labels)."""
    if not ax.get_legend_handles_labels()[0]:
        return
    if outside:
        ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=fontsize)


def _merge_identical(series: Mapping[str, tuple[Sequence[float], Sequence[float]]]
                     ) -> dict[str, tuple[Sequence[float], Sequence[float]]]:
    """Series with identical points drawn once, their labels joined ("a = b"): coinciding lines stay visible."""
    out: dict[tuple[tuple[float, ...], tuple[float, ...]], list[str]] = {}
    points: dict[tuple[tuple[float, ...], tuple[float, ...]], tuple[Sequence[float], Sequence[float]]] = {}
    for label, (xs, ys) in series.items():
        key = (tuple(map(float, xs)), tuple(map(float, ys)))
        out.setdefault(key, []).append(label)
        points[key] = (xs, ys)
    return {" = ".join(labels) + (" (identical)" if len(labels) > 1 else ""): points[key]
            for key, labels in out.items()}

