"""What a workload's report needs: its plots, progress text, terminal tables and ``fedpriv compare``'s sweep.

A workload (:class:`~fedpriv.workloads.base.Workload`) names its report as the class attribute
``report``, a :class:`WorkloadReport`; the default is this base class, which writes no plot, prints
nothing and has no embedded sweep (docs/architecture.md, "Adding a workload"). The runners call it
with what it reads — the run's setup, records and summary, a finished sweep's cells — never with the
workload itself. A report's plotting code imports matplotlib only when it draws (``fedpriv.plots``):
a node imports the workload, and with it its report, but never draws.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from fedpriv.workloads.base import Setup
    from fedpriv.workloads.protocol import Outcome

__all__ = ["CellRun", "WorkloadReport", "keyed_sweep"]


@dataclass(frozen=True)
class CellRun:
    """One finished cell of a ``fedpriv compare`` sweep, as a workload's row and plots read it."""

    label: str
    config: Any
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    directory: Path


def keyed_sweep(cells: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """A sweep labelled by its overrides: ``key=value`` per override, floats to 4 significant digits."""
    return [(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in o.items()), o)
            for o in cells]


class WorkloadReport:
    """A workload's report (module docstring); subclass it and override what the workload shows."""

    def plots(self, setup: Setup, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        """Write the run's PNG plots (and any other result file) into ``directory`` (default: none)."""
        return None

    def progress_text(self, record: dict[str, Any]) -> str:
        """What a progress line shows of a committed record."""
        return ""

    def print_run(self, console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        """Print a finished run's tables to a rich console (default: nothing)."""
        return None

    def default_sweep(self, base: Any) -> list[tuple[str, dict[str, Any]]]:
        """``fedpriv compare``'s embedded sweep for this workload: (label, overrides of ``base``) per cell."""
        return []

    def row(self, cell: CellRun) -> dict[str, Any]:
        """One row of ``fedpriv compare``'s table and CSV for a finished cell."""
        return {"cell": cell.label, "rounds": len(cell.records), "status": cell.summary.get("status"),
                "seconds_per_round": cell.summary.get("seconds_per_round"), "run_dir": str(cell.directory)}

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        """``fedpriv compare``'s plots over the cells (default: none)."""
        return []

    def print_cells(self, console: Any, rows: list[dict[str, Any]], base: Any) -> None:
        """Print ``fedpriv compare``'s table to a rich console (default: nothing)."""
        return None


class ModuleReport(WorkloadReport):
    """A report whose terminal output and sweep are its workload's report module's: ``print_run``, ``row``,
    ``print_cells`` and ``DEFAULT_SWEEP`` (labelled by its overrides, :func:`keyed_sweep`); a subclass sets
    ``module = sys.modules[__name__]`` in that module and adds the plots, the progress text and what differs."""

    #: The workload's report module.
    module: ClassVar[ModuleType]

    def print_run(self, console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        self.module.print_run(console, records, summary)

    def default_sweep(self, base: Any) -> list[tuple[str, dict[str, Any]]]:
        return keyed_sweep(self.module.DEFAULT_SWEEP)

    def row(self, cell: CellRun) -> dict[str, Any]:
        return dict(self.module.row(cell))

    def print_cells(self, console: Any, rows: list[dict[str, Any]], base: Any) -> None:
        self.module.print_cells(console, rows, base)
