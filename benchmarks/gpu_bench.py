"""The batched engine on a CUDA GPU against the CPU: LR-785, the MLP and the CNN at N = 1000.

Run on a machine with a CUDA GPU and a CUDA build of torch:
``.venv/bin/python benchmarks/gpu_bench.py --record`` (writes ``benchmarks/results/gpu.json``).
Without CUDA it refuses; ``--dry-run`` is the CPU-only smoke test (20 clients, 2 rounds, the ``device``
key left out so the engine's default device runs; writes ``benchmarks/out/gpu_dry_run.json``).

Works: LR-785 (``flower_fair_bench.lr785``) and the seeds' MLP and CNN on the generated CIFAR-10-shaped
set (``seeds_scale_bench``: 50 training images per client), E = 5, B = 32, lr 0.1, C = 1, coordinatewise
Gaussian, FedAvg. For each work the batched engine runs twice in fresh processes (``_measure.py``), the
run configs differing only in ``device = "cpu"`` vs ``device = "cuda"``; seconds per round are
steady-state medians (rounds 2..R: round 1 holds CUDA's start-up).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import torch
from _common import add_record_option, write_result
from _measure import load_average, measure
from flower_fair_bench import lr785
from seeds_scale_bench import work, write_cifar_shaped


def devices(dry_run: bool) -> list[str | None]:
    """The ``device`` values to compare: cpu and cuda; a dry run leaves the key out (None) and runs on the CPU."""
    if dry_run:
        return [None]
    if not torch.cuda.is_available():
        raise SystemExit("gpu_bench.py needs a CUDA GPU and a CUDA build of torch (torch.cuda.is_available() is "
                         f"False, torch {torch.__version__}); --dry-run runs the small CPU-only smoke test instead")
    return ["cpu", "cuda"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--dry-run", action="store_true", help="CPU only, 20 clients, 2 rounds, device key left out")
    args = add_record_option(parser).parse_args()
    if args.dry_run and args.record:
        parser.error("--dry-run does not write the tracked results (drop --record)")
    clients, rounds = (20, 2) if args.dry_run else (args.clients, args.rounds)
    chosen = devices(args.dry_run)
    load = {"before": load_average()}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fedpriv-cifar-shaped-") as folder:
        data = Path(folder) / "cifar_shaped.npz"
        test_fraction = write_cifar_shaped(data, clients, 50)
        works = {"lr785": lr785(clients, rounds), **{m: work(m, data, test_fraction, clients, rounds)
                                                      for m in ("mlp", "cnn")}}
        for name, config in works.items():
            for device in chosen:
                row = {"work": name, "clients": clients, "device": device or "default (key left out)",
                       **measure({"config": config, "engine": "batched", "device": device})}
                rows.append(row)
                print(f"{name:>6} {row['device']:>22}: round 1 {row['round_1_s']:7.2f} s, steady "
                      f"{row['steady_s_per_round']:7.3f} s/round, chunk {row['chunk']}", flush=True)
    load["after"] = load_average()
    ratios = {}
    if not args.dry_run:
        by = {(r["work"], r["device"]): r["steady_s_per_round"] for r in rows}
        ratios = {name: by[(name, "cpu")] / by[(name, "cuda")] for name in works}
        print(f"cpu / cuda: {ratios}")
    write_result(args.record, "gpu_dry_run" if args.dry_run else "gpu", {
        "benchmark": "batched engine, device cuda vs cpu (LR-785, MLP, CNN)", "rows": rows,
        "cpu_over_cuda": ratios, "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_average": load,
    })


if __name__ == "__main__":
    main()
