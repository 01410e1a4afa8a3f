"""The shared distribution-method interface and registry (fedpriv/estimation/distribution.py).

Every name in METHODS must build and honour the randomness contract: row i of a batched
``perturb`` through ``RowStreams`` equals user i answering alone with its own stream (what the
Flower ClientApp does). Names whose module is still being written are skipped, saying which.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

import numpy as np
import pytest

from fedpriv.estimation import distribution as dist
from fedpriv.estimation.distribution import (
    METHOD_MODULES,
    METHODS,
    DistributionEstimate,
    DistributionMethod,
    bucket_centres,
    check_reports,
    check_values,
    get_method,
    histogram_moments,
)
from fedpriv.rng import RowStreams, stream

D = 256  # a power of 4 and of 2, divisible by every CFO bin count


def _build(name: str, epsilon: float = 1.0, d: int = D) -> DistributionMethod:
    """get_method(name), skipped while the providing module does not exist yet."""
    module = METHOD_MODULES[name]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} (providing {name!r}) is not written yet")
    return get_method(name, epsilon, d)


@pytest.mark.parametrize("name", METHODS)
def test_every_method_builds(name):
    method = _build(name)
    assert isinstance(method, DistributionMethod)
    assert method.epsilon == 1.0 and method.d == D
    assert isinstance(method.guarantee, str) and method.guarantee and "\n" not in method.guarantee


@pytest.mark.parametrize("name", METHODS)
def test_batched_rows_equal_each_user_alone(name):
    method = _build(name)
    ids = [3, 17, 4, 99, 0, 12345]
    values = np.array([0.0, 0.1, 0.5, 0.73, 0.999, 1.0])
    batch = method.perturb(values, RowStreams.keyed(42, 0, ids, "x"))
    assert batch and all(np.shape(v)[0] == len(ids) for v in batch.values())
    for i, cid in enumerate(ids):
        alone = method.perturb(values[i:i + 1], RowStreams([stream(42, 0, cid, "x")]))
        assert alone.keys() == batch.keys()
        for key in batch:
            np.testing.assert_array_equal(alone[key], batch[key][i:i + 1], err_msg=f"{name}: field {key!r}, row {i}")


@pytest.mark.parametrize("name", METHODS)
def test_estimate_of_concatenated_reports(name):
    method = _build(name)
    parts = [method.perturb(stream(1, 0, k, "data").random(300), stream(1, 0, k, "x")) for k in range(3)]
    reports = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    est = method.estimate(reports)
    assert isinstance(est, DistributionEstimate) and est.epsilon == 1.0
    assert est.histogram is not None or est.mean is not None
    if est.histogram is not None:
        assert est.histogram.shape == (D,)


@pytest.mark.parametrize("name, label", [("sw-ems", "sw-ems"), ("sw-em", "sw-em")])
def test_sw_names_and_smoothing(name, label):
    method = get_method(name, 1.0, 16)
    assert method.smoothing == (name == "sw-ems")
    est = method.estimate(method.perturb(stream(0, 0, 0, "d").random(200), stream(0, 0, 0, "x")))
    assert est.method == label


def test_unknown_method_lists_the_allowed_names():
    with pytest.raises(ValueError, match=r"name must be one of 'sw-ems', 'sw-em', 'grr', .*got 'sw'"):
        get_method("sw", 1.0, 16)


def test_unknown_parameter_is_refused():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'bins'"):
        get_method("sw-ems", 1.0, 16, bins=4)
    with pytest.raises(TypeError, match=r"multiple values for keyword argument 'smoothing'"):
        get_method("sw-em", 1.0, 16, smoothing=True)


class _Toy(DistributionMethod):
    name = "toy"

    def perturb(self, values, rng):
        return {"report": check_values(values) + rng.random((len(values),))}

    def estimate(self, reports):
        return DistributionEstimate(None, float(np.mean(reports["report"])) - 0.5, None, self.name, self.epsilon)


def test_registry_finds_a_subclass_by_its_name(monkeypatch):
    module = types.ModuleType("fedpriv_toy_methods")
    module.__spec__ = importlib.machinery.ModuleSpec("fedpriv_toy_methods", None)
    module._Toy, module.DistributionMethod = _Toy, DistributionMethod
    monkeypatch.setitem(sys.modules, "fedpriv_toy_methods", module)
    monkeypatch.setattr(dist, "METHOD_MODULES", {**METHOD_MODULES, "toy": "fedpriv_toy_methods"})
    monkeypatch.setattr(dist, "METHODS", (*METHODS, "toy"))
    method = dist.get_method("toy", 2.0, 8)
    assert isinstance(method, _Toy) and (method.epsilon, method.d) == (2.0, 8)
    monkeypatch.setattr(module, "_Toy2", type("_Toy2", (_Toy,), {}), raising=False)  # two classes named "toy"
    with pytest.raises(ImportError, match=r"exactly one DistributionMethod named 'toy'.*found 2"):
        dist.get_method("toy", 2.0, 8)


def test_registry_says_which_module_is_missing(monkeypatch):
    monkeypatch.setattr(dist, "METHOD_MODULES", {**METHOD_MODULES, "ghost": "fedpriv.estimation.no_such_module"})
    monkeypatch.setattr(dist, "METHODS", (*METHODS, "ghost"))
    with pytest.raises(ImportError, match=r"'ghost' is provided by module fedpriv.estimation.no_such_module"):
        dist.get_method("ghost", 1.0, 8)


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": 0.0}, r"epsilon must be > 0 and finite, got 0.0"),
    ({"epsilon": float("inf")}, r"epsilon must be > 0 and finite"),
    ({"epsilon": np.array([1.0, 2.0])}, r"epsilon must be a scalar"),
    ({"d": 1}, r"d must be >= 2, got 1"),
    ({"d": "8"}, r"d must be an integer, got '8'"),
])
def test_base_class_validates_epsilon_and_d(kwargs, match):
    params = {"epsilon": 1.0, "d": 8, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        _Toy(params["epsilon"], params["d"])


# ------------------------------------------------------------------------------ estimate record
def test_from_histogram_uses_bucket_centres():
    d = 8
    est = DistributionEstimate.from_histogram(np.full(d, 1 / d), "toy", 1.0)
    c = bucket_centres(d)
    assert est.mean == pytest.approx(0.5) and est.variance == pytest.approx(np.mean((c - 0.5) ** 2))
    assert est.variance == pytest.approx((d**2 - 1) / (12 * d**2))  # uniform on the d centres
    assert histogram_moments(np.eye(d)[2]) == pytest.approx((2.5 / d, 0.0))
    assert not est.histogram.flags.writeable and est.converged and est.warnings == ()


def test_estimate_copies_its_histogram():
    h = np.full(4, 0.25)
    est = DistributionEstimate.from_histogram(h, "toy", 1.0)
    h[0] = 9.0
    assert est.histogram[0] == 0.25


@pytest.mark.parametrize("kwargs, match", [
    ({"histogram": None, "mean": None}, r"needs a histogram or a mean, got neither"),
    ({"histogram": np.ones((2, 2)) / 4}, r"histogram must be a 1-D array"),
    ({"histogram": np.array([0.5, np.nan])}, r"histogram must be finite"),
    ({"mean": float("nan")}, r"mean must be finite or None, got nan"),
    ({"method": ""}, r"method must be a non-empty string"),
    ({"epsilon": -1.0}, r"epsilon must be > 0"),
    ({"iterations": -1}, r"iterations must be >= 0, got -1"),
])
def test_estimate_record_rejects_bad_fields(kwargs, match):
    params = {"histogram": np.full(4, 0.25), "mean": 0.5, "variance": 0.1, "method": "toy", "epsilon": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        DistributionEstimate(**params)


# ------------------------------------------------------------------------------ shared checks
@pytest.mark.parametrize("values, match", [
    ([0.5, 1.2, 3.0, -0.01], r"values must lie in the domain \[0, 1\], got 3 value\(s\) outside \(e.g. 1.2\)"),
    ([], r"values must be a non-empty array"),
    (np.zeros((2, 2)), r"values must be a 1-D array"),
])
def test_check_values(values, match):
    with pytest.raises(ValueError, match=match):
        check_values(values)


@pytest.mark.parametrize("reports, match", [
    ({"a": np.ones(3)}, r"reports must hold the field\(s\) 'a', 'b', missing 'b'"),
    ({"a": np.ones(3), "b": np.ones(2)}, r"same number of rows \(users\), got \{'a': 3, 'b': 2\}"),
    ({"a": np.ones(0), "b": np.ones(0)}, r"at least one user's report, got an empty report set"),
    ({"a": 1.0, "b": np.ones(1)}, r"reports\['a'\] must have one row per user, got a scalar"),
])
def test_check_reports(reports, match):
    with pytest.raises(ValueError, match=match):
        check_reports(reports, ("a", "b"))


def test_check_reports_wants_a_mapping():
    with pytest.raises(TypeError, match=r"reports must be a mapping"):
        check_reports([1, 2], ("a",))
