"""MovieLens-100k fetch from a (fake) recbole wheel, the offline error path, and ``fedpriv datasets``.

Nothing here downloads: pip is replaced by a stand-in (monkeypatched ``subprocess.run``) and the
wheel is a small zip the tests build.
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedpriv.data.movielens import (
    ML100K_MEMBERS,
    default_cache_dir,
    fetch_movielens_100k,
    movielens_100k_path,
)
from fedpriv.data.ratings import read_ratings
from simulations.datasets_cli import datasets_app

INTER = ("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
         "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n196\t377\t4\t881250950\n")
ITEM = ("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
        "242\tKolya\t1996\tComedy\n302\tL.A. Confidential\t1997\tCrime Film-Noir Mystery Thriller\n"
        "377\tHeavyweights\t1994\tChildren's Comedy\n")


def _fake_wheel(path: Path, members: tuple[str, ...] = ML100K_MEMBERS) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("recbole/__init__.py", "")
        for member in members:
            zf.writestr(member, INTER if member.endswith(".inter") else ITEM)
    return path


def _check_cache(cache: Path) -> None:
    assert sorted(p.name for p in cache.iterdir()) == ["ml-100k.inter", "ml-100k.item"]  # nothing else
    r = read_ratings(cache / "ml-100k.inter")
    assert (r.n_users, r.n_items, len(r)) == (3, 3, 4)
    assert r.item_genres[r.item_ids.tolist().index(377)] == ("Children", "Comedy")


def test_fetch_from_a_local_wheel(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "recbole-1.2.1-py3-none-any.whl")
    cache = tmp_path / "cache"
    path = fetch_movielens_100k(cache, wheel=wheel)
    assert path == cache / "ml-100k.inter" and movielens_100k_path(cache) == path
    _check_cache(cache)
    # a second fetch finds the cache and touches neither the wheel nor pip
    wheel.unlink()
    assert fetch_movielens_100k(cache, wheel=wheel) == path


def test_fetch_runs_pip_download_and_extracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        _fake_wheel(dest / "recbole-1.2.1-py3-none-any.whl")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    cache = tmp_path / "c"
    fetch_movielens_100k(cache)
    (cmd,) = calls
    assert cmd[1:5] == ["-m", "pip", "download", "recbole==1.2.1"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
    _check_cache(cache)


@pytest.mark.parametrize(
    "outcome, match",
    [
        (subprocess.CompletedProcess([], 1, "", "ERROR: Could not find a version (Network is unreachable)"),
         "exit status 1: ERROR: Could not find a version"),
        (subprocess.TimeoutExpired("pip", 300), "no answer within 300 s"),
        (FileNotFoundError("python"), "could not start pip"),
        (subprocess.CompletedProcess([], 0, "", ""), "left no recbole wheel"),
    ],
)
def test_fetch_offline_error_says_what_was_tried_and_the_ways_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: object, match: str
) -> None:
    def failing_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]

    monkeypatch.setattr(subprocess, "run", failing_pip)
    with pytest.raises(RuntimeError, match=match) as info:
        fetch_movielens_100k(tmp_path / "cache")
    msg = str(info.value)
    for needle in ("pip download recbole==1.2.1", "offline", "--wheel", "u.data", ".inter"):
        assert needle in msg
    assert not (tmp_path / "cache" / "ml-100k.inter").exists()


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda p: _fake_wheel(p, members=ML100K_MEMBERS[:1]), ValueError, "lacks recbole/dataset_example/ml-100k/ml-100k.item"),
        (lambda p: p.write_text("not a zip") and p, ValueError, "not a zip file"),
        (lambda p: p, FileNotFoundError, "does not exist"),
    ],
)
def test_bad_wheels(tmp_path: Path, make: object, error: type, match: str) -> None:
    wheel = make(tmp_path / "w.whl")  # type: ignore[operator]
    with pytest.raises(error, match=match):
        fetch_movielens_100k(tmp_path / "cache", wheel=wheel)
    assert not (tmp_path / "cache" / "ml-100k.inter").exists()


def test_path_without_cache_points_to_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="fedpriv datasets fetch movielens-100k"):
        movielens_100k_path(tmp_path)


def test_default_cache_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDPRIV_DATA_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "movielens-100k"
    monkeypatch.delenv("FEDPRIV_DATA_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "fedpriv" / "movielens-100k"


# --------------------------------------------------------------------------------------------
# the CLI
# --------------------------------------------------------------------------------------------
def test_cli_fetch_with_wheel_prints_counts(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "recbole.whl")
    res = CliRunner().invoke(datasets_app, ["fetch", "movielens-100k", "--cache-dir", str(tmp_path / "c"),
                                            "--wheel", str(wheel)])
    assert res.exit_code == 0, res.output
    assert "ml-100k.inter" in res.output and "ratings" in res.output
    assert "│ users          │ 3" in res.output and "│ ratings        │ 4" in res.output


def test_cli_fetch_offline_and_unknown_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "network down"))
    res = CliRunner().invoke(datasets_app, ["fetch", "movielens-100k", "--cache-dir", str(tmp_path)])
    assert res.exit_code == 2 and "offline" in res.output
    res = CliRunner().invoke(datasets_app, ["fetch", "ml-1m"])
    assert res.exit_code == 2 and "NAME must be one of 'movielens-100k', 'mnist-5k'" in res.output


def test_cli_info(tmp_path: Path) -> None:
    path = tmp_path / "u.data"
    path.write_text("1\t1\t4\t0\n1\t2\t5\t0\n2\t2\t3\t0\n")
    res = CliRunner().invoke(datasets_app, ["info", str(path)])
    assert res.exit_code == 0, res.output
    for needle in ("│ users          │ 2", "│ items          │ 2", "│ ratings        │ 3", "[0.5, 5]", "75.0000%"):
        assert needle in res.output
    path.write_text("1\t1\t4\t0\n1\t2\t7\t0\n")
    res = CliRunner().invoke(datasets_app, ["info", str(path)])
    assert res.exit_code == 2 and "u.data:2: rating 7 lies outside" in res.output.replace("\n", "")
    res = CliRunner().invoke(datasets_app, ["info", str(path), "--r-max", "10"])
    assert res.exit_code == 0 and "[0.5, 10]" in res.output
