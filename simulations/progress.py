"""Progress of a long CLI job: a rich bar on a terminal, plain rate-limited lines anywhere else.

A rich bar is drawn only on a terminal, so ``make run`` under CI or with its output piped to a
file would print nothing for minutes. Off a terminal :class:`ProgressReporter` prints one line per
update instead, flushed at once, for example::

    cell 2/13 coordinatewise laplace ε=1: round 40/100, elapsed 12.4 s, ETA 31 s
    round 7/30: acc 0.512, elapsed 4.1 s, ETA 13 s

:class:`RateLimiter` decides which updates become lines: the first and the last always (of each
cell in a sweep), every update of a short job, else at most one line per ``interval`` seconds.
The ETA is the elapsed time per finished unit times the units left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import Progress, TaskID

__all__ = ["ProgressReporter", "RateLimiter", "format_seconds"]

#: Seconds between two plain lines of a long job.
INTERVAL = 5.0
#: A job with at most this many units prints a line for every one.
EVERY_UP_TO = 20


def format_seconds(seconds: float) -> str:
    """``"8.2 s"``, ``"3 min 05 s"`` or ``"1 h 02 min"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, secs = divmod(int(round(seconds)), 60)
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(int(round(seconds / 60)), 60)
    return f"{hours} h {minutes:02d} min"


class RateLimiter:
    """Which updates of a job become a plain line (the first and last always; see the module docstring).

    Parameters
    ----------
    interval : float (default: 5.0)
        Least seconds between two lines of a long job.
    every_up_to : int (default: 20)
        A job of at most this many units prints every update.
    clock : callable returning seconds (default: ``time.monotonic``)
        Injected by tests.
    """

    def __init__(self, *, interval: float = INTERVAL, every_up_to: int = EVERY_UP_TO,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not interval >= 0:
            raise ValueError(f"interval must be >= 0 seconds, got {interval!r}")
        self.interval, self.every_up_to, self.clock = interval, every_up_to, clock
        self._last: float | None = None

    def due(self, done: int, total: int | None, *, force: bool = False) -> bool:
        """Whether the update that brings the job to ``done`` of ``total`` units (None: unknown) is printed."""
        now = self.clock()
        short = total is not None and total <= self.every_up_to
        last = total is not None and done >= total
        if force or short or last or self._last is None or now - self._last >= self.interval:
            self._last = now
            return True
        return False


class ProgressReporter:
    """One progress display for a CLI job: ``with ProgressReporter(console, total=...) as p: ... p.advance()``.

    On a terminal (``console.is_terminal``) a transient rich bar; otherwise plain lines on the same
    console, ``[cell i/n label: ]unit r/R[: text], elapsed …, ETA …``, limited by ``limiter``.

    Parameters
    ----------
    console : rich.console.Console
        Where the bar or the lines go.
    total : int or None
        Units of the whole job (rounds of every cell for a sweep); None when unknown (no ETA).
    unit : str (default: "round")
        What one unit is called in a line.
    description : str (default: "")
        The bar's first description.
    cells : int or None (default: None)
        For a sweep: the number of cells, announced one by one with :meth:`start_cell`.
    limiter : RateLimiter or None (default: None)
        Which updates become lines (default: :class:`RateLimiter` with its defaults); its clock also
        measures the elapsed time.
    """

    def __init__(self, console: Console, *, total: int | None, unit: str = "round", description: str = "",
                 cells: int | None = None, limiter: RateLimiter | None = None) -> None:
        self.console, self.total, self.unit, self.cells = console, total, unit, cells
        self.limiter = limiter or RateLimiter()
        self.bar: Progress | None = Progress(console=console, transient=True) if console.is_terminal else None
        self._task: TaskID | None = None
        self._description = description
        self._start = self.limiter.clock()
        self._done = 0
        self._cell = 0
        self._cell_label = ""
        self._cell_steps: int | None = None
        self._cell_done = 0

    def __enter__(self) -> ProgressReporter:
        self._start = self.limiter.clock()
        if self.bar is not None:
            self.bar.start()
            self._task = self.bar.add_task(self._description, total=self.total)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.stop()

    def start_cell(self, label: str, steps: int | None) -> None:
        """The next cell of a sweep begins; it has ``steps`` units."""
        self._cell += 1
        self._cell_label, self._cell_steps, self._cell_done = label, steps, 0
        if self.bar is not None and self._task is not None:
            self.bar.update(self._task, description=label)

    def advance(self, text: str = "", *, position: int | None = None) -> None:
        """One unit finished; ``text`` describes it, ``position`` is its number (default: the count so far)."""
        self._done += 1
        self._cell_done += 1
        if self.bar is not None and self._task is not None:
            self.bar.advance(self._task)
            if text:
                self.bar.update(self._task, description=f"{self.unit} {position or self._done}: {text}")
            return
        in_cell = self.cells is not None
        edge = in_cell and (self._cell_done == 1 or self._cell_done == self._cell_steps)
        if self.limiter.due(self._done, self.total, force=edge):
            self.console.print(self._line(text, position), markup=False, highlight=False, soft_wrap=True)
            self.console.file.flush()

    def _line(self, text: str, position: int | None) -> str:
        elapsed = self.limiter.clock() - self._start
        if self.cells is not None:
            head = f"cell {self._cell}/{self.cells} {self._cell_label}: {self.unit} {self._cell_done}"
            head += f"/{self._cell_steps}" if self._cell_steps is not None else ""
        else:
            head = f"{self.unit} {position or self._done}" + (f"/{self.total}" if self.total is not None else "")
        left = None if self.total is None else max(0, self.total - (position or self._done))
        eta = "?" if left is None else format_seconds(elapsed / self._done * left)
        return f"{head}{': ' + text if text else ''}, elapsed {format_seconds(elapsed)}, ETA {eta}"
