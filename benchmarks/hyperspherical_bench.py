"""Hyper-spherical round trip at d = 10^6 vs one ``torch.cumsum`` over the same tensor (ratio).

Run by hand: ``.venv/bin/python benchmarks/hyperspherical_bench.py [--d 1000000] [--reps 30]``.
Times ``to_hyperspherical``, ``from_hyperspherical`` and the two together on one float64 vector,
and one ``torch.cumsum`` over that vector as the O(d) yardstick (docs/hyperspherical.md §4: both
directions are O(d)), in one run, median of ``--reps`` repetitions after ``--warmup`` untimed
ones, each case timed in turn within every repetition so drift hits all cases alike. Writes
``benchmarks/out/hyperspherical.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from _common import add_record_option, write_result

from fedpriv.perturbation.hyperspherical import from_hyperspherical, to_hyperspherical


def time_once(fn: Callable[[], object]) -> float:
    """Seconds for one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--d", type=int, default=10**6)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = add_record_option(parser).parse_args()
    if args.reps < 20:
        parser.error(f"--reps must be >= 20, got {args.reps}")

    g = torch.randn(args.d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    r, theta = to_hyperspherical(g)
    rel_err = float(torch.linalg.vector_norm(from_hyperspherical(r, theta) - g) / torch.linalg.vector_norm(g))

    cases: dict[str, Callable[[], object]] = {
        "torch.cumsum": lambda: torch.cumsum(g, dim=-1),
        "to_hyperspherical": lambda: to_hyperspherical(g),
        "from_hyperspherical": lambda: from_hyperspherical(r, theta),
        "round trip (to + from)": lambda: from_hyperspherical(*to_hyperspherical(g)),
    }
    for _ in range(args.warmup):
        for fn in cases.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.reps):
        for name, fn in cases.items():
            samples[name].append(time_once(fn))

    base = statistics.median(samples["torch.cumsum"])
    rows = {}
    print(f"d = {args.d}, float64, {args.reps} reps after {args.warmup} warm-up, "
          f"{torch.get_num_threads()} torch thread(s)")
    print(f"{'case':<24}{'median ms':>11}{'min ms':>9}{'max ms':>9}{'ratio vs cumsum':>17}")
    for name, ts in samples.items():
        med = statistics.median(ts)
        rows[name] = {"median_s": med, "min_s": min(ts), "max_s": max(ts), "ratio_vs_cumsum": med / base}
        print(f"{name:<24}{1e3 * med:>11.3f}{1e3 * min(ts):>9.3f}{1e3 * max(ts):>9.3f}{med / base:>17.1f}")
    print(f"round-trip relative error: {rel_err:.2e}")

    out = {
        "benchmark": "to_hyperspherical + from_hyperspherical vs one torch.cumsum, same float64 vector",
        "d": args.d,
        "dtype": "float64",
        "reps": args.reps,
        "warmup": args.warmup,
        "statistic": "median of time.perf_counter() differences",
        "results": rows,
        "ratio_round_trip_vs_cumsum": rows["round trip (to + from)"]["ratio_vs_cumsum"],
        "round_trip_relative_error": rel_err,
    }
    write_result(args.record, "hyperspherical", out)


if __name__ == "__main__":
    main()
