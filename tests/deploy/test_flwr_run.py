"""``flwr run`` through simulations.deploy.flwr_run packs the same bundle without walking ignored folders."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk, build_fab_from_files
from flwr.cli.utils import collect_files

from simulations.deploy import flwr_run
from simulations.deploy.flwr_cli import run_argv
from simulations.deploy.local import DEFAULT_APP_DIR

#: Files of an app laid out as fedpriv's checkout: sources, and what its .gitignore leaves out.
FILES = ["fedpriv/a.py", "fedpriv/sub/b.py", "fedpriv/sub/table.json", "clients/c.py", "strategies/s.py",
         "README.md", "LICENSE", "tests/test_a.py", "benchmarks/results/r.json", "benchmarks/results/r.tmp",
         "simulations/x.py", "docs/deployment.md", "examples/e.py", "fedpriv/__pycache__/a.cpython-311.pyc",
         ".venv/lib/python3.11/site-packages/pkg/m.py", ".venv/pyvenv.cfg", "build/lib/fedpriv/a.py",
         "runs/20261205-x/summary.json", "fedpriv.egg-info/PKG-INFO", ".pytest_cache/v/cache/lastfailed",
         "benchmarks/out/o.json"]


def _app(root: Path, gitignore: str) -> Path:
    """An app folder with fedpriv's pyproject.toml, ``gitignore`` as its .gitignore and FILES (plus a symlink)."""
    root.mkdir()
    shutil.copy(DEFAULT_APP_DIR / "pyproject.toml", root / "pyproject.toml")
    (root / ".gitignore").write_text(gitignore)
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n")
    os.symlink(root / "fedpriv/a.py", root / "clients/link.py")
    return root


def test_the_bundle_equals_flowers_own_and_ignored_folders_are_not_walked(tmp_path: Path) -> None:
    app = _app(tmp_path / "app", (DEFAULT_APP_DIR / ".gitignore").read_text())
    listed = flwr_run.collect_app_files(app)
    assert not [p for p in listed if p.split("/")[0] in {".venv", "build", "runs", ".pytest_cache"}
                or "__pycache__" in p or ".egg-info" in p], sorted(listed)
    assert set(listed) < set(collect_files(app))  # a subset of what flwr lists: nothing added
    assert build_fab_from_files(listed)[0] == build_fab_from_disk(app)


def test_a_negated_pattern_walks_every_folder(tmp_path: Path) -> None:
    app = _app(tmp_path / "app", ".venv\nbuild/\n!build/lib/fedpriv/a.py\n")
    assert flwr_run.collect_app_files(app) == collect_files(app)


def test_flwr_run_goes_through_the_launcher() -> None:
    argv = run_argv(Path("/app"), "fedpriv-local", Path("/c.toml"))
    assert argv[1:4] == ["-m", "simulations.deploy.flwr_run", "run"]
    assert argv[4:] == ["/app", "fedpriv-local", "--run-config", "/c.toml", "--stream"]


def test_flwr_build_through_the_launcher_writes_flowers_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flwr.cli.build as build

    monkeypatch.setattr(build, "collect_files", build.collect_files)  # main replaces it and sys.argv: both restored
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    app = _app(tmp_path / "app", (DEFAULT_APP_DIR / ".gitignore").read_text())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        flwr_run.main(["build", "--app", str(app)])
    assert info.value.code in (0, None)
    assert build.collect_files is flwr_run.collect_app_files
    (fab,) = tmp_path.glob("*.fab")
    assert fab.read_bytes() == build_fab_from_disk(app)


def test_a_release_without_the_listing_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import flwr.cli.build as build

    monkeypatch.delattr(build, "collect_files")
    with pytest.raises(SystemExit, match="no flwr.cli.build.collect_files"):
        flwr_run.main(["run", "."])
