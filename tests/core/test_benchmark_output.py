"""Benchmarks write an untracked file unless asked to record: running one never rewrites benchmarks/results/."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _common(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    spec = importlib.util.spec_from_file_location("bench_common", BENCH / "_common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(module, "OUT", tmp_path / "out")
    return module


def test_a_run_writes_out_and_record_writes_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    common = _common(monkeypatch, tmp_path)
    args = common.add_record_option(__import__("argparse").ArgumentParser()).parse_args([])
    assert args.record is False
    path = common.write_result(args.record, "x", {"a": 1})
    assert path == tmp_path / "out" / "x.json" and json.loads(path.read_text())["a"] == 1
    assert not (tmp_path / "results").exists()
    recorded = common.write_result(True, "x", {"a": 2})
    assert recorded == tmp_path / "results" / "x.json"


def test_every_benchmark_script_takes_record() -> None:
    scripts = [p for p in BENCH.glob("*.py") if not p.name.startswith("_")]
    assert scripts
    missing = [p.name for p in scripts if "write_result(args.record" in p.read_text()
               and "add_record_option(parser)" not in p.read_text()]
    unchanged = [p.name for p in scripts if "write_result(" in p.read_text() and "write_result(args.record" not in p.read_text()]
    assert not missing and not unchanged, (missing, unchanged)


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_benchmarks_out_is_ignored_by_git() -> None:
    result = subprocess.run(["git", "check-ignore", "-q", "benchmarks/out/x.json"], cwd=ROOT)
    assert result.returncode == 0
