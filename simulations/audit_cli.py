"""``fedpriv audit``: an empirical lower bound on ε for a mechanism, a perturbation or the LDP-SGD upload (docs/audit.md).

Exit status: 0 when every audited target is ``consistent``, 1 when any is ``violated`` (its claim is
refuted at the stated confidence: scripts and CI can gate on it), 2 for bad input.
"""

from __future__ import annotations

import math
import time

import typer
from rich.markup import escape
from rich.table import Table

from simulations.cli_common import console
from simulations.progress import ProgressReporter

__all__ = ["audit_cmd"]

ALL = "all"


def _names(target: str) -> list[str]:
    """The targets to audit: one name, or every one for ``all``; an unknown name lists the valid ones."""
    from fedpriv.audit import TARGETS

    if target == ALL:
        return list(TARGETS)
    if target not in TARGETS:
        raise typer.BadParameter(f"MECHANISM must be one of {', '.join(TARGETS)}, or {ALL!r}; got {target!r}",
                                 param_hint="MECHANISM")
    return [target]


def _check(epsilon: float, confidence: float, delta: float) -> None:
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise typer.BadParameter(f"--epsilon must be > 0 and finite, got {epsilon}", param_hint="--epsilon")
    if not 0 < confidence < 1:
        raise typer.BadParameter(f"--confidence must be in (0, 1), got {confidence}", param_hint="--confidence")
    if not 0 < delta < 1:
        raise typer.BadParameter(f"--delta must be in (0, 1), got {delta}", param_hint="--delta")


def audit_cmd(
    mechanism: str = typer.Argument(..., show_default=False,
                                    help="What to audit: a mechanism (laplace, gaussian, piecewise, duchi, square_wave), "
                                      "coordinatewise/<mechanism>, ldpvec/<mechanism>, geodp, dpsgd, ldp-mod "
                                      "(the LDP-SGD client upload), or 'all'."),
    epsilon: float = typer.Option(..., "--epsilon", help="The ε the target is built with and claims."),
    samples: int = typer.Option(100_000, "--samples", min=2, help="Outputs drawn per neighbouring input."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence of the lower bound, in (0, 1)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Run seed of the keyed random streams."),
    delta: float = typer.Option(1e-5, "--delta", help="δ of the targets with Gaussian noise, in (0, 1)."),
) -> None:
    """Empirical lower bound on ε from two neighbouring inputs, with a verdict (exit 1 if any claim is violated).

    MECHANISM: laplace, gaussian, piecewise, duchi, square_wave, coordinatewise/<mechanism>, ldpvec/<mechanism>,
    geodp, dpsgd, ldp-mod (the LDP-SGD client upload of LdpMod), or all. See docs/audit.md.
    """
    from fedpriv.audit import audit, get_target

    _check(epsilon, confidence, delta)
    names = _names(mechanism)
    start, rows = time.perf_counter(), []
    with ProgressReporter(console, total=len(names), unit="target", description="auditing") as progress:
        for name in names:
            built = get_target(name, epsilon, delta=delta)
            result = audit(built, samples=samples, confidence=confidence, seed=seed)
            rows.append((built, result))
            progress.advance(f"{name} epsilon_lb={result.epsilon_lb:.3f} {result.verdict}")
    table = Table(title=f"empirical privacy audit at ε = {epsilon:g}: {samples:,} samples per input, "
                        f"confidence {confidence:g}, seed {seed}",
                  caption="ε_lb: lower bound on ε from the held-out event (docs/audit.md); violated: ε_lb > claimed ε")
    for column in ("target", "claimed ε", "δ", "ε_lb", "verdict", "event"):
        table.add_column(column, justify="right" if column in ("claimed ε", "δ", "ε_lb") else "left",
                         no_wrap=column != "event", overflow="fold")
    for built, r in rows:
        colour = "red" if r.verdict == "violated" else "green"
        table.add_row(built.name, f"{r.claimed_epsilon:.4g}", f"{r.delta:g}", f"{r.epsilon_lb:.3f}",
                      f"[{colour}]{r.verdict}[/{colour}]", escape(r.event))
    console.print(table)
    if len(rows) == 1:
        built = rows[0][0]
        console.print(f"neighbours: {built.neighbours}; statistic: {built.statistic}", markup=False, soft_wrap=True)
    violated = [b.name for b, r in rows if r.verdict == "violated"]
    console.print(f"{len(rows) - len(violated)} consistent, {len(violated)} violated"
                  + (f" ({', '.join(violated)})" if violated else "")
                  + f" in {time.perf_counter() - start:.1f} s", markup=False, soft_wrap=True)
    if violated:
        raise typer.Exit(code=1)
