"""Perturbing 10^8 coordinates with each mechanism vs raw RNG draws of the same size (ratio).

Run by hand: ``.venv/bin/python benchmarks/mechanisms_bench.py [--total 1e8] [--chunk 1e7]``.
Both sides use the same keyed Philox stream type as the library and the same chunking, in one run,
so the ratio is what a user pays for a mechanism over drawing the uniforms alone. Writes
``benchmarks/out/mechanisms.json``.
"""

from __future__ import annotations

import argparse
import time

from _common import add_record_option, write_result

from fedpriv.mechanisms import MECHANISMS, get_mechanism
from fedpriv.mechanisms.registry import example_params
from fedpriv.rng import stream

#: Every registered mechanism with the parameters it needs besides ε (δ for the Gaussian).
CASES = {name: example_params(name) for name in MECHANISMS}


def timed(fn, total: int, chunk: int) -> float:
    """Seconds to run ``fn(n)`` over ``total`` coordinates in chunks of ``chunk``."""
    start = time.perf_counter()
    done = 0
    while done < total:
        n = min(chunk, total - done)
        fn(n)
        done += n
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total", type=float, default=1e8)
    parser.add_argument("--chunk", type=float, default=1e7)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = add_record_option(parser).parse_args()
    total, chunk = int(args.total), int(args.chunk)
    x = stream(0, 0, 0, "bench-data").uniform(-1.0, 1.0, size=chunk)

    rng = stream(0, 0, 0, "bench-raw")
    timed(lambda n: rng.random(n), chunk, chunk)  # warm-up
    raw = timed(lambda n: rng.random(n), total, chunk)
    rows = {"raw_uniform_draws": {"seconds": raw, "ratio": 1.0}}
    print(f"{'case':<22}{'seconds':>10}{'ratio vs raw':>14}")
    print(f"{'raw uniform draws':<22}{raw:>10.2f}{1.0:>14.2f}")
    for name, params in CASES.items():
        mech = get_mechanism(name, args.epsilon, **params)
        r = stream(0, 0, 0, f"bench-{name}")
        secs = timed(lambda n, mech=mech, r=r: mech.perturb(x[:n], r), total, chunk)
        rows[name] = {"seconds": secs, "ratio": secs / raw}
        print(f"{name:<22}{secs:>10.2f}{secs / raw:>14.2f}")

    out = {
        "benchmark": "perturb 1e8 coordinates vs raw uniform draws of the same size",
        "total": total,
        "chunk": chunk,
        "epsilon": args.epsilon,
        "results": rows,
    }
    write_result(args.record, "mechanisms", out)


if __name__ == "__main__":
    main()
