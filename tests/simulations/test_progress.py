"""Progress of long CLI jobs: plain lines off a terminal (cell i/n, round r/R, elapsed, ETA), a bar on one."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.progress import Progress
from typer.testing import CliRunner

from simulations.cli import app
from simulations.progress import ProgressReporter, RateLimiter, format_seconds

runner = CliRunner()
TINY = ["--set", "num-clients=4", "--set", "rounds=3", "--set", "local-steps=1", "--engine", "fast"]
LINE = r"elapsed \d+\.\d s, ETA \d+\.\d s$"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """stdout is a pipe: no environment variable tells rich to treat it as a terminal."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


def _lines(output: str, pattern: str) -> list[str]:
    return [line for line in output.splitlines() if re.search(pattern, line)]


def test_a_short_job_prints_every_update_and_a_long_one_about_one_line_per_interval() -> None:
    clock = Clock()
    short = RateLimiter(interval=5.0, every_up_to=20, clock=clock)
    assert all(short.due(done, 20) for done in range(1, 21))  # 20 units: every one, however fast
    clock.now = 100.0
    long = RateLimiter(interval=5.0, every_up_to=20, clock=clock)
    printed = []
    for done in range(1, 1001):  # 1000 units, one every 0.1 s: 100 s in all
        clock.now += 0.1
        if long.due(done, 1000):
            printed.append(done)
    assert printed[0] == 1 and printed[-1] == 1000  # the first and the last always
    gaps = [b - a for a, b in zip(printed[:-1], printed[1:-1])]
    assert all(g >= 49 for g in gaps)  # never more than one line per 5 s (50 units)
    assert 19 <= len(printed) <= 22  # and about one per 5 s: 100 s / 5 s + first and last
    unknown = RateLimiter(interval=5.0, clock=clock)
    assert unknown.due(1, None) and not unknown.due(2, None)  # no total: the interval alone
    clock.now += 5.0
    assert unknown.due(3, None)
    with pytest.raises(ValueError, match="interval must be >= 0"):
        RateLimiter(interval=-1)


def test_plain_lines_carry_the_position_elapsed_time_and_eta() -> None:
    clock = Clock()
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with ProgressReporter(console, total=4, limiter=RateLimiter(clock=clock)) as progress:
        assert progress.bar is None
        clock.now += 10.0
        progress.advance("acc 0.500", position=1)
        clock.now += 10.0
        progress.advance("acc 0.600", position=2)
    assert out.getvalue().splitlines() == [
        "round 1/4: acc 0.500, elapsed 10.0 s, ETA 30.0 s",  # 10 s per round, 3 left
        "round 2/4: acc 0.600, elapsed 20.0 s, ETA 20.0 s",
    ]
    out = io.StringIO()
    with ProgressReporter(Console(file=out, force_terminal=False, width=200), total=5, cells=2,
                          limiter=RateLimiter(every_up_to=0, clock=clock)) as sweep:
        sweep.start_cell("epsilon=1", 2)
        for _ in range(2):
            clock.now += 1.0
            sweep.advance()
        sweep.start_cell("epsilon=10", 3)
        for _ in range(3):
            clock.now += 1.0
            sweep.advance()
    # every_up_to=0 and 1 s per round (< the 5 s interval): only each cell's first and last round print
    assert out.getvalue().splitlines() == [
        "cell 1/2 epsilon=1: round 1/2, elapsed 1.0 s, ETA 4.0 s",
        "cell 1/2 epsilon=1: round 2/2, elapsed 2.0 s, ETA 3.0 s",
        "cell 2/2 epsilon=10: round 1/3, elapsed 3.0 s, ETA 2.0 s",
        "cell 2/2 epsilon=10: round 3/3, elapsed 5.0 s, ETA 0.0 s",
    ]


def test_a_terminal_gets_the_rich_bar_and_no_plain_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with ProgressReporter(console, total=3, description="rounds") as progress:
        assert isinstance(progress.bar, Progress)
        for r in (1, 2, 3):
            progress.advance("acc 0.5", position=r)
        assert progress.bar.tasks[0].completed == 3
        assert progress.bar.tasks[0].description == "round 3: acc 0.5"
    assert "elapsed" not in out.getvalue() and "ETA" not in out.getvalue()


def test_durations_read_as_seconds_minutes_or_hours() -> None:
    assert format_seconds(8.24) == "8.2 s"
    assert format_seconds(185) == "3 min 05 s"
    assert format_seconds(3720) == "1 h 02 min"


def test_run_off_a_terminal_prints_round_lines(tmp_path, plain) -> None:
    result = runner.invoke(app, ["run", *TINY, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = _lines(result.output, r"^round \d/3: acc ")
    assert [line.split(":")[0] for line in lines] == ["round 1/3", "round 2/3", "round 3/3"]
    assert all(re.search(LINE, line) for line in lines), lines


def test_compare_off_a_terminal_prints_cell_and_round_lines(tmp_path, plain) -> None:
    result = runner.invoke(app, ["compare", *TINY, "--grid", "epsilon=1,10", "--set", "perturbation=coordinatewise",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = _lines(result.output, r"^cell \d/2 ")
    heads = [line.split(",")[0] for line in lines]
    assert heads == [f"cell {i}/2 epsilon={e}: round {r}/3" for i, e in ((1, 1), (2, 10)) for r in (1, 2, 3)]
    assert all(re.search(LINE, line) for line in lines), lines


def test_mechanisms_off_a_terminal_prints_cell_lines(tmp_path, plain) -> None:
    result = runner.invoke(app, ["mechanisms", "--eps", "1", "--n", "200", "--reps", "4", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = _lines(result.output, r"^cell \d/5, ")
    assert [line.split(",")[0] for line in lines] == [f"cell {i}/5" for i in range(1, 6)]
    assert all(re.search(LINE, line) for line in lines), lines
