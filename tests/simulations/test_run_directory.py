"""The run directory's bookkeeping: atomic commits, recovery, one writer, resume rules, I/O errors, corrupt files.

Each test here reproduces a finding of the fault and bad-input sweep on the run directory (a kill
between the checkpoint and the ledger under-reported ε; a round recorded twice after a kill; two
writers; disk full; resume ignoring ``--set`` and an edited ``config.toml``; corrupt files giving
tracebacks or a bare ``Aborted.``) and checks the behaviour that replaced it. The kill-at-every-step
matrix is in ``test_crash_consistency.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from typer.testing import CliRunner

from fedpriv import rundir
from fedpriv.config import RunConfig
from fedpriv.config_aliases import FedprivDeprecationWarning
from fedpriv.rundir import Committed, RunDirectory, RunDirectoryError, fork_run, lock_holder
from simulations.cli import app
from simulations.runner import RunInterrupted, run

ROOT = Path(__file__).resolve().parents[2]
cli = CliRunner()
SMALL = {"num-clients": 4, "rounds": 4, "local-steps": 2, "batch-size": 8, "perturbation": "coordinatewise",
         "mechanism": "laplace", "epsilon": 10.0, "noise-schedule": "last_step"}
CFG = RunConfig.from_mapping(SMALL)


def _stop_at(step: str, server_round: int):
    """A fault hook that raises KeyboardInterrupt (a Ctrl-C) at one step of one round's commit."""
    def hook(at: str, r: int) -> None:
        if (at, r) == (step, server_round):
            raise KeyboardInterrupt
    return hook


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory):
    """The uninterrupted run of CFG."""
    return run(CFG, engine="fast", root=tmp_path_factory.mktemp("whole"))


@pytest.fixture(scope="module")
def partial(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of CFG interrupted before round 3's commit: rounds 1 and 2 committed."""
    root = tmp_path_factory.mktemp("partial")
    rundir.fault_hook = _stop_at("commit-start", 3)
    try:
        with pytest.raises(RunInterrupted):
            run(CFG, engine="fast", root=root)
    finally:
        rundir.fault_hook = None
    (path,) = root.iterdir()
    return path


@pytest.fixture
def copy(partial: Path, tmp_path: Path) -> Path:
    """A fresh copy of the partial run directory to damage."""
    target = tmp_path / partial.name
    shutil.copytree(partial, target)
    return target


# ------------------------------------------------------------------ commit and recovery, unit level


class _Cfg:
    """A minimal configuration: what a run directory needs of one."""

    def __init__(self, **values: object) -> None:
        self.values = {"seed": 0, **values}

    def to_dict(self) -> dict:
        return dict(self.values)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.values, sort_keys=True).encode()).hexdigest()[:16]


def test_a_commit_holds_the_record_arrays_ledger_and_state_together(tmp_path: Path) -> None:
    d = RunDirectory.create(tmp_path, _Cfg(), "u")
    for r in (1, 2):
        committed = d.commit({"round": r, "eps": float("inf"), "ids": {1: 2}}, arrays={"w": np.arange(3.0) * r},
                             ledger={"spent": r}, state={"k": r})
        assert committed == {"round": r, "eps": float("inf"), "ids": {"1": 2}}  # as a resumed run reads it back
    d.close()
    with RunDirectory.open(d.path) as again:
        c = again.recover()
    assert c.round == 2 and c.notes == [] and [r["round"] for r in c.records] == [1, 2]
    np.testing.assert_array_equal(c.arrays["w"], np.arange(3.0) * 2)
    assert c.ledger == {"spent": 2} and c.state == {"k": 2}
    assert json.loads((d.path / "ledger.json").read_text()) == {"spent": 2}


def test_a_summary_reads_back_as_written_non_finite_floats_included(tmp_path: Path) -> None:
    # The deployed run hands back the summary it reads from disk; the in-process run the dict it wrote.
    # Both must compare equal, so inf/nan stored as strings come back as floats.
    summary = {"bits": float("inf"), "neg": float("-inf"), "nested": [{"x": float("inf")}], "name": "inf-free"}
    with RunDirectory.create(tmp_path, _Cfg(), "u") as d:
        d.write_json("summary.json", summary)
        back = d.read_json("summary.json")
    assert back == summary
    assert d.read_json("absent.json") is None


def test_rounds_must_increase_from_commit_to_commit(tmp_path: Path) -> None:
    with RunDirectory.create(tmp_path, _Cfg(), "u") as d:
        d.commit({"round": 2})
        with pytest.raises(ValueError, match="round must increase from commit to commit, got 2 after 2"):
            d.commit({"round": 2})


def test_a_fresh_directory_has_nothing_committed(tmp_path: Path) -> None:
    with RunDirectory.create(tmp_path, _Cfg(), "u") as d:
        assert d.recover() == Committed()


def _two_rounds(tmp_path: Path) -> Path:
    with RunDirectory.create(tmp_path, _Cfg(), "u") as d:
        d.commit({"round": 1, "x": 1}, ledger={"n": 1})
        d.commit({"round": 2, "x": 2}, ledger={"n": 2})
    return d.path


@pytest.mark.parametrize("extra, note", [
    (b'{"round": 3, "x": 3}\n', "dropped 1 line(s) of metrics.jsonl past the last committed round 2"),
    (b'{"round": 3, "x"', "dropped 1 line(s)"),  # a torn line (a kill inside it)
    (b'{"round": 2, "x": 2}\n', "dropped 1 line(s)"),  # a round written twice
])
def test_lines_past_the_last_commit_are_dropped(tmp_path: Path, extra: bytes, note: str) -> None:
    path = _two_rounds(tmp_path)
    with open(path / "metrics.jsonl", "ab") as fh:
        fh.write(extra)
    with RunDirectory.open(path) as d:
        c = d.recover()
    assert any(note in n for n in c.notes), c.notes
    assert [r["round"] for r in c.records] == [1, 2]
    assert [json.loads(x)["round"] for x in (path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.mark.parametrize("keep", ["one", "half"])
def test_a_line_lost_after_its_commit_comes_back_from_the_commit_record(tmp_path: Path, keep: str) -> None:
    path = _two_rounds(tmp_path)
    lines = (path / "metrics.jsonl").read_bytes().split(b"\n")
    (path / "metrics.jsonl").write_bytes(lines[0] + b"\n" + (lines[1][:7] if keep == "half" else b""))
    with RunDirectory.open(path) as d:
        c = d.recover()
    assert any("re-appended the line of round 2" in n for n in c.notes)
    assert [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()] == [
        {"round": 1, "x": 1}, {"round": 2, "x": 2}]


@pytest.mark.parametrize("damage", ["edit", "lose-two", "empty", "reorder"])
def test_committed_lines_edited_or_lost_are_refused(tmp_path: Path, damage: str) -> None:
    path = _two_rounds(tmp_path)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    text = {"edit": lines[0].replace('"x": 1', '"x": 9') + "\n" + lines[1] + "\n", "lose-two": "", "empty": "\n",
            "reorder": lines[1] + "\n" + lines[0] + "\n"}[damage]
    (path / "metrics.jsonl").write_text(text)
    with RunDirectory.open(path) as d, pytest.raises(RunDirectoryError,
                                                    match=r"metrics.jsonl does not match the 2 committed round"):
        d.recover()


@pytest.mark.parametrize("damage, match", [
    (lambda p: p.write_bytes(b""), r"checkpoint.npz is empty"),
    (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), r"checkpoint.npz is truncated or corrupt"),
    (lambda p: p.write_bytes(b"not a zip file at all"), r"checkpoint.npz is truncated or corrupt"),
    (lambda p: np.savez(p, params=np.zeros(3)), r"checkpoint.npz is not a fedpriv 2 commit record"),
])
def test_a_corrupt_commit_record_is_refused_naming_it(tmp_path: Path, damage, match: str) -> None:
    path = _two_rounds(tmp_path)
    damage(path / "checkpoint.npz")
    with RunDirectory.open(path) as d, pytest.raises(RunDirectoryError, match=match):
        d.recover()


def test_a_commit_record_of_another_run_is_refused(tmp_path: Path) -> None:
    path = _two_rounds(tmp_path / "a")
    with RunDirectory.create(tmp_path / "b", _Cfg(seed=1), "u") as other:
        other.commit({"round": 1})
    shutil.copy(other.path / "checkpoint.npz", path / "checkpoint.npz")
    with RunDirectory.open(path) as d, pytest.raises(RunDirectoryError, match="belongs to another configuration"):
        d.recover()


def test_a_torn_ledger_copy_is_rewritten_from_the_commit(tmp_path: Path) -> None:
    path = _two_rounds(tmp_path)
    (path / "ledger.json").write_text('{"n": ')
    with RunDirectory.open(path) as d:
        c = d.recover()
    assert any("rewrote ledger.json from the last commit (torn or unreadable)" in n for n in c.notes)
    assert json.loads((path / "ledger.json").read_text()) == {"n": 2}


@pytest.mark.parametrize("damage, match", [
    (lambda p: (p / "config.toml").write_text('seed = 0\nname = "x'), r"config.toml is torn or not TOML"),
    (lambda p: (p / "config.toml").write_text(""), r"config.toml is empty"),
    (lambda p: (p / "config.toml").unlink(), r"config.toml is missing"),
    (lambda p: (p / "config.toml").write_text("seed = 7\n"), r"config.toml was changed after the run started \(seed: 0 → 7\)"),
    (lambda p: (p / "run.json").write_text('{"schema'), r"run.json is torn or not JSON"),
    (lambda p: (p / "run.json").unlink(), r"has no run.json"),
])
def test_bad_directory_files_are_refused_naming_them(tmp_path: Path, damage, match: str) -> None:
    path = _two_rounds(tmp_path)
    damage(path)
    with pytest.raises(RunDirectoryError, match=match):
        RunDirectory.open(path)


def test_a_second_writer_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = _two_rounds(tmp_path)
    with RunDirectory.open(path):
        with pytest.raises(RunDirectoryError, match=rf"in use by another writer \(process {os.getpid()},"):
            RunDirectory.open(path)
    RunDirectory.open(path).close()  # released


@pytest.mark.subprocess
def test_the_lock_of_a_killed_writer_is_taken_over(tmp_path: Path) -> None:
    path = _two_rounds(tmp_path)
    code = ("import os, signal, sys; from fedpriv.rundir import RunDirectory; "
            f"d = RunDirectory.open({str(path)!r}); print(os.getpid(), flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    dead = int(proc.stdout.split()[0])
    assert json.loads((path / ".lock").read_text())["pid"] == dead and lock_holder(path) is None
    with RunDirectory.open(path) as d:
        assert d.recover().round == 2
        assert json.loads((path / ".lock").read_text())["pid"] == os.getpid()


def test_a_write_error_names_the_file_and_keeps_the_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _two_rounds(tmp_path)

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    with RunDirectory.open(path) as d:
        d.recover()
        monkeypatch.setattr(rundir.os, "fsync", disk_full)
        with pytest.raises(RunDirectoryError, match=r"cannot write .*checkpoint.npz: No space left on device; rounds "
                                                      r"up to 2 are committed and intact"):
            d.commit({"round": 3, "x": 3})
        monkeypatch.undo()
    with RunDirectory.open(path) as d:
        assert d.recover().round == 2


# ------------------------------------------------------------------ runner and CLI


def test_the_run_directory_is_made_only_after_the_data_is_loaded(tmp_path: Path) -> None:
    cfg = CFG.with_values({"dataset": "mnist", "data-dir": str(tmp_path / "no-such-dir")})
    with pytest.raises((ValueError, FileNotFoundError)):
        run(cfg, root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_resume_refuses_set_and_a_config_file(copy: Path) -> None:
    out = cli.invoke(app, ["run", "--resume", str(copy), "--set", "epsilon=1"])
    assert out.exit_code == 2
    assert "--set epsilon=1 would be ignored" in out.output and "--fork --set epsilon=1" in out.output
    cfg_file = copy.parent / "c.toml"
    cfg_file.write_text("epsilon = 1.0\n")
    out = cli.invoke(app, ["run", str(cfg_file), "--resume", str(copy)])
    assert out.exit_code == 2 and "a CONFIG file cannot be given with it" in out.output
    assert len((copy / "metrics.jsonl").read_text().splitlines()) == 2  # nothing ran


def test_resume_refuses_a_different_config_through_the_api(copy: Path) -> None:
    with pytest.raises(RunDirectoryError, match=r"holds a run of another configuration \(epsilon: 10.0 → 1.0\)"):
        run(CFG.replace(epsilon=1.0), resume=copy)


def test_a_run_directory_written_before_the_keys_were_renamed_resumes(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Its config.toml and manifest hold the old flat names (docs/configuration.md, "Renamed keys"): it loads, its
    digest still matches, and the resumed run finishes as an uninterrupted one (the same records)."""
    from fedpriv import config_aliases
    from fedpriv.config import load_config
    from fedpriv.config_aliases import RENAMED

    monkeypatch.setattr(config_aliases, "_NOTIFIED", set())

    cfg = RunConfig.from_mapping({"task": "secure-sum", "num-clients": 8, "mean-dims": 4, "sum-iterations": 3,
                                  "secagg": "oracle", "run-epsilon": 2.0, "sum-clip-norm": 0.5})
    whole_run = run(cfg, engine="fast", root=tmp_path / "whole")
    rundir.fault_hook = _stop_at("commit-start", 2)
    try:
        with pytest.raises(RunInterrupted):
            run(cfg, engine="fast", root=tmp_path / "old")
    finally:
        rundir.fault_hook = None
    (path,) = (tmp_path / "old").iterdir()
    manifest = json.loads((path / "run.json").read_text())
    new_names = {new for names in RENAMED.values() for new in names.values()}
    old = {v: k for k, v in RENAMED["secure-sum"].items()}
    flat = {old.get(k, k): v for k, v in manifest["config"].items() if k in old or k not in new_names}
    assert flat["epsilon"] == 2.0 and flat["rounds"] == 3 and "run-epsilon" not in flat
    manifest["config"] = flat
    (path / "run.json").write_text(json.dumps(manifest, indent=2))
    (path / "config.toml").write_text(tomli_w.dumps(flat))  # flat, as fedpriv wrote it before the tables
    with pytest.warns(FedprivDeprecationWarning, match="'rounds' is called 'sum-iterations'"):
        assert load_config(RunDirectory.open(path, cfg, lock=False)) == cfg  # and the digests agree
    out = cli.invoke(app, ["run", "--resume", str(path), "--engine", "fast"])
    assert out.exit_code == 0, out.output
    assert _without_seconds(RunDirectory.open(path, lock=False).rounds()) == \
        _without_seconds(RunDirectory.open(whole_run.directory, lock=False).rounds())


def test_an_edited_config_toml_is_refused_naming_the_keys(copy: Path) -> None:
    text = (copy / "config.toml").read_text().replace("epsilon = 10.0", "epsilon = 1.0")
    (copy / "config.toml").write_text(text)
    out = cli.invoke(app, ["run", "--resume", str(copy)])
    assert out.exit_code == 2
    assert "config.toml was changed after the run started (epsilon: 10.0 → 1.0)" in out.output


def test_fork_with_set_starts_a_new_directory_from_the_commit(copy: Path, whole, tmp_path: Path) -> None:
    out = cli.invoke(app, ["run", "--resume", str(copy), "--fork", "--set", "rounds=5", "--out", str(tmp_path / "f"),
                           "--engine", "fast"])
    assert out.exit_code == 0, out.output
    (forked,) = (tmp_path / "f").iterdir()
    lines = [json.loads(x) for x in (forked / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3, 4, 5]
    assert _without_seconds(lines[:4]) == _without_seconds(whole.rounds)
    manifest = json.loads((forked / "run.json").read_text())
    assert manifest["forked_from"]["changed_keys"] == ["rounds"] and manifest["forked_from"]["round"] == 2
    assert len((copy / "metrics.jsonl").read_text().splitlines()) == 2  # the source is left as it was


@pytest.mark.parametrize("damage, file, what", [
    (lambda p: (p / "checkpoint.npz").write_bytes(b""), "checkpoint.npz", "is empty"),
    (lambda p: (p / "checkpoint.npz").write_bytes((p / "checkpoint.npz").read_bytes()[:300]), "checkpoint.npz",
     "is truncated or corrupt"),
    (lambda p: (p / "metrics.jsonl").write_text('{"round": 1, "cl'), "metrics.jsonl", "does not match"),
    (lambda p: (p / "config.toml").write_text('seed = "'), "config.toml", "is torn or not TOML"),
    (lambda p: (p / "run.json").write_text("{"), "run.json", "is torn or not JSON"),
    (lambda p: (p / "summary.json").write_text("{"), None, None),  # unfinished: removed and rewritten
    (lambda p: (p / "ledger.json").write_text('{"sch'), None, None),  # a copy: rewritten from the commit
])
def test_fedpriv_run_resume_explains_each_corrupt_file_in_one_line(copy: Path, whole, damage, file: str | None,
                                                                    what: str | None) -> None:
    damage(copy)
    out = cli.invoke(app, ["run", "--resume", str(copy), "--engine", "fast"])
    assert "Traceback" not in out.output and "Aborted" not in out.output
    if file is None:  # recoverable: the run finishes as the uninterrupted one
        assert out.exit_code == 0, out.output
        lines = [json.loads(x) for x in (copy / "metrics.jsonl").read_text().splitlines()]
        assert _without_seconds(lines) == _without_seconds(whole.rounds)
        assert json.loads((copy / "ledger.json").read_text()) == json.loads(
            (whole.directory / "ledger.json").read_text())
        return
    assert out.exit_code in (1, 2)
    (line,) = [x for x in out.output.splitlines() if x.startswith("error:")]
    assert f"{copy / file} {what}" in line and ("start a new run" in line or "restore" in line), line


def test_ctrl_c_says_how_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rundir, "fault_hook", _stop_at("checkpoint-committed", 2))
    args = ["run", "--out", str(tmp_path)] + [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    out = cli.invoke(app, args)
    assert out.exit_code == 130
    (path,) = tmp_path.iterdir()
    assert f"interrupted: the committed rounds are in {path}; continue with `fedpriv run --resume {path}`" in out.output
    monkeypatch.undo()
    assert cli.invoke(app, ["run", "--resume", str(path), "--engine", "fast"]).exit_code == 0
    assert [json.loads(x)["round"] for x in (path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]


def _cli(*args: str, limit: int | None = None) -> subprocess.Popen:
    """``fedpriv`` in a child process (optionally under a file-size limit: a disk that fills up)."""
    def preexec() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.Popen([sys.executable, "-c", "from simulations.cli import app; app()", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=preexec)


@pytest.mark.slow(reason="a 60-round resume in a CLI process, long enough to try a second one while it runs")
@pytest.mark.subprocess
def test_two_concurrent_resumes_the_second_fails_at_once_and_nothing_is_duplicated(tmp_path: Path) -> None:
    cfg = CFG.replace(rounds=60)
    rundir.fault_hook = _stop_at("commit-start", 2)
    try:
        with pytest.raises(RunInterrupted):
            run(cfg, engine="fast", root=tmp_path)
    finally:
        rundir.fault_hook = None
    (path,) = tmp_path.iterdir()
    first = _cli("run", "--resume", str(path))
    deadline = time.monotonic() + 120
    while "pid" not in (lock_holder(path) or {}) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    holder = lock_holder(path)
    assert holder is not None and holder["pid"] == first.pid, "the first resume never took the lock"
    began = time.monotonic()
    out = cli.invoke(app, ["run", "--resume", str(path)])
    assert time.monotonic() - began < 30  # at once, not after the first finished
    assert out.exit_code == 1 and f"is in use by another writer (process {first.pid}," in out.output
    assert first.wait(timeout=300) == 0, first.stdout.read()
    rounds = [json.loads(x)["round"] for x in (path / "metrics.jsonl").read_text().splitlines()]
    assert rounds == list(range(1, 61))


@pytest.mark.slow(reason="a 30-round run twice, once in a CLI process whose file size limit stops it")
@pytest.mark.subprocess
def test_a_full_disk_stops_the_run_in_one_line_and_resume_finishes_it(tmp_path: Path) -> None:
    cfg = CFG.replace(rounds=30)
    whole = run(cfg, engine="fast", root=tmp_path / "whole")
    biggest_fixed = max((whole.directory / name).stat().st_size for name in ("config.toml", "run.json"))
    limit = biggest_fixed + 2000  # more than the files written once; metrics.jsonl outgrows it mid-run
    assert (whole.directory / "metrics.jsonl").stat().st_size > limit + 2000
    args = ["run", "--engine", "fast", "--out", str(tmp_path / "full")] + [
        a for k, v in cfg.changed().items() for a in ("--set", f"{k}={v}")]
    proc = _cli(*args, limit=limit)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, output
    assert "Traceback" not in output
    (line,) = [x for x in output.splitlines() if x.startswith("error:")]
    (path,) = (tmp_path / "full").iterdir()
    assert f"cannot write {path}/" in line and "File too large" in line and "are committed and intact" in line, line
    assert f"resume with `fedpriv run --resume {path}`" in line
    resumed = run(None, resume=path, engine="fast")
    assert _without_seconds(resumed.rounds) == _without_seconds(whole.rounds)
    np.testing.assert_array_equal(resumed.params, whole.params)
    assert resumed.summary["privacy"] == whole.summary["privacy"]


# ------------------------------------------------------------------ links and modes


def _plant_link(path: Path, victim: Path) -> None:
    """Replace ``path`` (if any) by a symbolic link to ``victim``."""
    path.unlink(missing_ok=True)
    path.symlink_to(victim)


@pytest.mark.parametrize("name", [".lock", "metrics.jsonl"])
def test_resuming_a_run_whose_file_is_a_link_refuses_it_and_leaves_the_target_alone(copy: Path, tmp_path: Path,
                                                                                      name: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    _plant_link(copy / name, victim)
    out = cli.invoke(app, ["run", "--resume", str(copy), "--engine", "fast"])
    assert out.exit_code in (1, 2) and "Traceback" not in out.output
    (line,) = [x for x in out.output.splitlines() if x.startswith("error:")]
    assert (f"{copy / name} is a symbolic link: fedpriv never follows a link in a run directory" in line
            and "start a new run" in line), line
    assert victim.read_text() == "someone else's file\n"
    with pytest.raises(RunDirectoryError, match=rf"{copy / name} is a symbolic link"):
        with RunDirectory.open(copy) as d:
            d.recover()
    assert victim.read_text() == "someone else's file\n"


@pytest.mark.parametrize("name", ["ledger.json", "summary.json", "checkpoint.npz", "config.toml"])
def test_a_link_where_a_run_file_is_written_is_refused_naming_it(tmp_path: Path, name: str) -> None:
    path = _two_rounds(tmp_path / "runs")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    _plant_link(path / name, victim)
    with pytest.raises(RunDirectoryError, match=rf"{path / name} is a symbolic link"):
        with RunDirectory.open(path) as d:
            d.recover()
            d.write_json("summary.json", {"status": "finished"})
            d.commit({"round": 3, "x": 3}, ledger={"n": 3})
    assert victim.read_text() == "keep"


def test_a_link_left_where_the_commit_writes_its_temporary_file_is_not_followed(tmp_path: Path) -> None:
    path = _two_rounds(tmp_path / "runs")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    with RunDirectory.open(path) as d:
        d.recover()
        for tmp in (".checkpoint.npz.tmp", ".summary.json.tmp"):
            (path / tmp).symlink_to(victim)
        d.commit({"round": 3, "x": 3}, ledger={"n": 3})
        d.write_json("summary.json", {"status": "finished"})
    assert victim.read_text() == "keep"
    with RunDirectory.open(path) as d:
        assert d.recover().round == 3


def test_every_file_of_a_run_is_0600_and_every_folder_0700(whole, tmp_path: Path) -> None:
    def modes(root: Path) -> dict[str, int]:
        return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}

    written = modes(whole.directory)
    assert {"metrics.jsonl", "checkpoint.npz", "ledger.json", "summary.json", "config.toml", "run.json", ".lock"} <= \
        set(written) and any(name.endswith(".png") for name in written)
    assert {k: v for k, v in written.items() if v != (0o700 if (whole.directory / k).is_dir() else 0o600)} == {}
    forked = fork_run(whole.directory, tmp_path / "forks", CFG.replace(rounds=5), "f")
    forked.restart()
    forked.close()
    assert set(modes(forked.path).values()) == {0o600, 0o700}
