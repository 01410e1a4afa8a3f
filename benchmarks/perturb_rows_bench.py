"""Per-row cost of ``Perturbation.perturb_rows`` on a batch vs a loop of ``perturb`` calls.

Run by hand: ``.venv/bin/python benchmarks/perturb_rows_bench.py [--n 1000] [--d 7850] [--reps 3]``.
Coordinatewise perturbation with every mechanism on an (N, d) float32 batch (d = 7850: the MNIST
logistic-regression model), both sides with the same keyed streams and the stream creation left
out. The reference is the raw draws, two uniforms per coordinate, per client. Best of ``--reps``.
Writes ``benchmarks/out/perturb_rows.json``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from _common import add_record_option, write_result

from fedpriv.mechanisms import MECHANISMS
from fedpriv.mechanisms.registry import example_params
from fedpriv.perturbation import get_perturbation
from fedpriv.rng import RowStreams, stream

#: Every registered mechanism with the parameters it needs besides ε (δ for the Gaussian).
CASES = {name: example_params(name) for name in MECHANISMS}


def best_of(fn: Callable[[list], object], n: int, reps: int) -> float:
    """Best wall time of ``fn(generators)`` over ``reps`` runs, fresh keyed streams each run."""
    times = []
    for _ in range(reps):
        gens = [stream(0, 1, c, "noise") for c in range(n)]
        start = time.perf_counter()
        fn(gens)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--d", type=int, default=7850)
    parser.add_argument("--reps", type=int, default=3)
    args = add_record_option(parser).parse_args()
    n, d = args.n, args.d
    u = torch.randn(n, d, generator=torch.Generator().manual_seed(0)) * 0.01
    draws = best_of(lambda gens: [(g.random(d), g.random(d)) for g in gens], n, args.reps)
    rows: dict[str, dict[str, float]] = {}
    print(f"N={n} d={d} threads={torch.get_num_threads()}: raw draws (2 uniforms/coordinate) "
          f"{1e3 * draws / n:.3f} ms/row")
    for name, extra in CASES.items():
        p = get_perturbation("coordinatewise", mechanism=name, epsilon=2.0, clip_norm=0.5, **extra)
        batched = best_of(lambda gens, p=p: p.perturb_rows(u, RowStreams(gens)), n, args.reps)
        loop = best_of(lambda gens, p=p: [p.perturb(u[i], g) for i, g in enumerate(gens)], n, args.reps)
        rows[name] = {"batched_ms_per_row": 1e3 * batched / n, "loop_ms_per_row": 1e3 * loop / n}
        print(f"  {name:12s} batched {1e3 * batched / n:.3f} ms/row   loop of perturb {1e3 * loop / n:.3f} ms/row")
    write_result(args.record, "perturb_rows", {"n": n, "d": d, "raw_draws_ms_per_row": 1e3 * draws / n, "cases": rows})


if __name__ == "__main__":
    main()
