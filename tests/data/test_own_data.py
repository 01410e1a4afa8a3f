"""Your own model and data: ``model = "package.module:factory"``, ``dataset = "npz:PATH"`` / ``"csv:PATH"``.

Each bad input raises one error that names the key or the file; a good one trains in every engine
federated LDP-SGD runs in (fast, batched, the Flower simulation) and loads on a deployed node.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpriv.config import RunConfig
from fedpriv.data import clear_dataset_cache, load_dataset, partition_for
from fedpriv.models import build_model, num_params

FACTORY = "tests.data.own_model:small_mlp"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    clear_dataset_cache()


def _arrays(n: int = 120) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.random((n, 6)).astype(np.float32)
    return x, (x[:, 0] > 0.5).astype(np.int64) + 2 * (x[:, 1] > 0.5)  # four classes


def _npz(tmp_path: Path, **arrays: np.ndarray) -> str:
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return str(path)


def test_npz_dataset_is_split_stratified_and_keeps_every_example(tmp_path: Path) -> None:
    x, y = _arrays()
    train, test = load_dataset(RunConfig.from_mapping({"dataset": f"npz:{_npz(tmp_path, X=x, y=y)}",
                                                       "test-fraction": 0.25}))
    per_class = np.floor(0.25 * np.bincount(y) + 0.5).astype(int)  # each class's share, half rounded up
    assert np.bincount(test.y, minlength=4).tolist() == per_class.tolist()
    assert (len(train) + len(test), train.num_classes, train.input_shape) == (120, 4, (6,))
    together = np.concatenate([train.x, test.x])
    assert sorted(map(tuple, together.tolist())) == sorted(map(tuple, x.tolist()))  # a split, nothing lost


def test_csv_dataset_maps_text_labels_to_class_ids(tmp_path: Path) -> None:
    x, y = _arrays(40)
    path = tmp_path / "data.csv"
    names = np.array(["ant", "bee", "cat", "dog"])
    path.write_text("a,b,c,d,e,f,animal\n" + "".join(",".join(f"{v:.6f}" for v in row) + f",{names[k]}\n"
                                                        for row, k in zip(x, y)))
    train, test = load_dataset(RunConfig.from_mapping({"dataset": f"csv:{path}", "label-column": "animal"}))
    assert (len(train) + len(test), train.num_classes, train.input_shape) == (40, 4, (6,))
    by_row = {f"{r[0]:.4f} {r[1]:.4f}": k for r, k in zip(x, y)}
    assert all(by_row[f"{r[0]:.4f} {r[1]:.4f}"] == k for r, k in zip(train.x, train.y))  # sorted names → ids


@pytest.mark.parametrize(("content", "extra", "message"), [
    (None, {}, "must be a NumPy .npz file with arrays X and y, got a path that does not exist"),
    ({"x": 1, "y": 1}, {}, "must hold arrays named 'X' (features) and 'y' (labels)"),
    ({"X": "float", "y": "float"}, {}, "y must be a 1-D array of integer class ids"),
    ({"X": "text", "y": "int"}, {}, "X must be a numeric array"),
    ({"X": "short", "y": "int"}, {}, "X and y must hold the same number of examples"),
    ({"X": "nan", "y": "int"}, {}, "X must be finite, got 1 NaN/inf value(s)"),
    ({"X": "float", "y": "one-class"}, {}, "at least two classes"),
])
def test_bad_npz_raises_one_error_naming_the_file(tmp_path: Path, content: dict[str, object] | None,
                                                  extra: dict[str, object], message: str) -> None:
    x, y = _arrays()
    made = {"float": x, "int": y, "text": x.astype(str), "short": x[:-1], "one-class": np.zeros_like(y),
            "nan": np.where(np.arange(x.size).reshape(x.shape) == 7, np.nan, x), 1: x}
    path = str(tmp_path / "missing.npz") if content is None else _npz(
        tmp_path, **{k: made[v] if v in made else x for k, v in content.items()})  # type: ignore[index]
    if content is not None and content.get("y") == "float":
        path = _npz(tmp_path, X=x, y=y.astype(np.float64))
    with pytest.raises((ValueError, FileNotFoundError)) as info:
        load_dataset(RunConfig.from_mapping({"dataset": f"npz:{path}", **extra}))
    assert message in str(info.value) and path in str(info.value)


def test_a_csv_given_as_npz_is_named(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("a,label\n1,0\n2,1\n")
    with pytest.raises(ValueError, match="must be a NumPy .npz file .* use dataset = 'csv:PATH'"):
        load_dataset(RunConfig.from_mapping({"dataset": f"npz:{path}"}))


@pytest.mark.parametrize(("text", "label", "message"), [
    ("a,b,label\n1,2,0\n3,4,1\n", "lab", "label-column must be one of the columns of .*data.csv \\(a, b, label\\), "
     "got 'lab'"),
    ("a,b,label\n1,2,0\n3,4,1\n", "", "label-column must name the label column of .*data.csv"),
    ("a,b,label\n1,x,0\n3,4,1\n", "label", "column 'b' of .*data.csv must be numeric, got 1 non-numeric"),
    ("a,b,label\n1,2,0\n3,4,0\n", "label", "label column 'label' of .*data.csv must hold at least two"),
])
def test_bad_csv_raises_one_error_naming_the_key_or_file(tmp_path: Path, text: str, label: str,
                                                         message: str) -> None:
    path = tmp_path / "data.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_dataset(RunConfig.from_mapping({"dataset": f"csv:{path}", "label-column": label}))


@pytest.mark.parametrize("value", ["npz:", "csv:  ", "parquet:x.parquet", "iris"])
def test_dataset_key_names_the_allowed_forms(value: str) -> None:
    with pytest.raises(ValueError, match="dataset must be 'digits', 'synthetic', 'synthetic-clients', 'mnist', 'mnist-5k', "
                                         "'cifar10', 'npz:PATH' or 'csv:PATH'"):
        RunConfig.from_mapping({"dataset": value})


def test_factory_model_is_the_factorys_module_with_a_keyed_init() -> None:
    state = torch.random.get_rng_state()
    a = build_model(FACTORY, (6,), 4, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global random state is left as it was
    b, c = build_model(FACTORY, (6,), 4, seed=1), build_model(FACTORY, (6,), 4, seed=2)
    assert num_params(a) == 6 * 8 + 8 + 8 * 4 + 4
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))
    assert num_params(build_model("tests.data.own_model:Net", (6,), 2, seed=0)) == 14  # no-argument factory


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_package.models:make", "model = 'no_such_package.models:make': cannot import module 'no_such_package"),
    ("tests.data.own_model:missing", "has no attribute 'missing'"),
    ("tests.data.own_model:NOT_CALLABLE", "'NOT_CALLABLE' must be a callable returning a torch.nn.Module, got int"),
    ("tests.data.own_model:not_a_module", "must return a torch.nn.Module, got list"),
    ("tests.data.own_model:wrong_outputs", "must map a batch to logits of shape \\(n, 4\\) .* got \\(2, 3\\)"),
    ("tests.data.own_model:Net", "the module must accept a batch of shape \\(n, 3\\)"),
    ("tests.data.own_model:with_batchnorm", "must return a module without buffers .* got buffers \\['0.running_mean'"),
])
def test_bad_factory_raises_one_error_naming_the_key(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_model(spec, (3,), 4, seed=0)


def test_model_key_accepts_a_factory_and_names_the_forms() -> None:
    assert RunConfig.from_mapping({"model": FACTORY})["model"] == FACTORY
    with pytest.raises(ValueError, match="model must be 'lr', 'mlp', 'cnn', 'cnn-thesis' or 'package.module:factory'"):
        RunConfig.from_mapping({"model": "resnet"})


def test_run_setup_rejects_a_factory_that_does_not_import() -> None:
    from fedpriv.workloads import get_workload

    with pytest.raises(ValueError, match="model = 'tests.data.own_model:missing'"):
        get_workload("ldp-sgd").setup(RunConfig.from_mapping({"model": "tests.data.own_model:missing"}))


def _byo_config(tmp_path: Path) -> RunConfig:
    x, y = _arrays()
    return RunConfig.from_mapping({"dataset": f"npz:{_npz(tmp_path, X=x, y=y)}", "model": FACTORY,
                                   "num-clients": 3, "rounds": 2, "local-steps": 2, "batch-size": 8,
                                   "partition": "iid", "perturbation": "coordinatewise", "mechanism": "piecewise",
                                   "epsilon": 5.0})


def test_deployed_node_loads_its_own_partition_of_an_npz_dataset(tmp_path: Path) -> None:
    """The node's load path (the ClientApp's ``_node``: setup, client id, ``load_client``) reads the file."""
    from clients.app import _node
    from fedpriv.workloads import get_workload

    cfg = _byo_config(tmp_path)
    train, _ = load_dataset(cfg)
    parts = partition_for(cfg, train)
    for k in range(3):
        _, client, data = _node(cfg, {"partition-id": k, "num-partitions": 3}, get_workload("ldp-sgd"))
        assert client == k
        np.testing.assert_array_equal(data.x.numpy(), train.x[parts[k]])
        np.testing.assert_array_equal(data.y.numpy(), train.y[parts[k]])
        assert num_params(data.model) == 6 * 8 + 8 + 8 * 4 + 4


@pytest.mark.slow(reason="trains in all three engines, one a Flower simulation (its ClientApps in Ray actors)")
@pytest.mark.subprocess
def test_own_model_and_npz_data_train_in_every_engine(tmp_path: Path) -> None:
    """fast and the Flower simulation give the same bits (same kernels, one thread); batched trains the same model."""
    from simulations.runner import run

    cfg = _byo_config(tmp_path)
    results = {engine: run(cfg, engine=engine, root=tmp_path / engine) for engine in ("fast", "batched", "flower")}
    for engine, result in results.items():
        assert result.summary["status"] == "finished", (engine, result.summary.get("error"))
        assert result.params.size == 6 * 8 + 8 + 8 * 4 + 4
        assert len(result.rounds) == 2 and 0.0 <= result.rounds[-1]["test-accuracy"] <= 1.0
    np.testing.assert_array_equal(results["flower"].params, results["fast"].params)
    assert [r["client-ids"] for r in results["batched"].rounds] == [r["client-ids"] for r in results["fast"].rounds]
