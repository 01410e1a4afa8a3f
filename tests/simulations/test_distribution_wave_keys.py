"""task = "distribution": the Square Wave ablation keys sw-b, sw-shape and sw-bucketize reach the method, or are refused."""

from __future__ import annotations

import pytest

from fedpriv.config import RunConfig
from fedpriv.estimation.config import SW_BUCKETIZE, SW_SHAPES
from fedpriv.estimation.sw_ems import BUCKETIZE, SquareWaveEMS, WaveEMS
from fedpriv.estimation.waves import WAVE_SHAPES
from fedpriv.workloads.registry import get_workload

BASE = {"task": "distribution", "num-clients": 200, "dist-buckets": 16, "repetitions": 1, "epsilon": 1.0}


def _method(**values: object) -> object:
    return get_workload("distribution").setup(RunConfig.from_mapping({**BASE, **values})).method  # type: ignore[attr-defined]


def test_choices_match_the_library() -> None:
    assert SW_SHAPES == WAVE_SHAPES and SW_BUCKETIZE == BUCKETIZE


def test_defaults_are_sw_ems_with_the_closed_form_b() -> None:
    method = _method()
    assert type(method) is SquareWaveEMS and method.b == pytest.approx(0.256083, abs=1e-6)  # b(1), §2.1
    assert method.bucketize == "R-B" and method.smoothing


def test_width_shape_and_bucketization_reach_the_method() -> None:
    assert _method(**{"sw-b": "0.05"}).b == 0.05
    wave = _method(**{"dist-method": "sw-em", "sw-shape": "trapezoid-0.4", "sw-b": "0.2"})
    assert type(wave) is WaveEMS and (wave.r, wave.b, wave.smoothing) == (0.4, 0.2, False)
    discrete = _method(**{"sw-bucketize": "B-R"})
    assert type(discrete) is SquareWaveEMS and discrete.bucketize == "B-R"


@pytest.mark.parametrize(("values", "message"), [
    ({"dist-method": "cfo-16", "sw-b": "0.1"}, "sw-b apply to dist-method 'sw-ems' or 'sw-em' only"),
    ({"dist-method": "hh-admm", "sw-shape": "triangle"}, "sw-shape apply to dist-method 'sw-ems' or 'sw-em' only"),
    ({"sw-shape": "triangle", "sw-bucketize": "B-R"}, "sw-bucketize = 'B-R' is the discrete square wave"),
    ({"sw-b": "-0.1"}, "sw-b"),
    ({"sw-b": "wide"}, "sw-b"),
    ({"sw-b": ""}, "sw-b"),
    ({"sw-b": "inf"}, "sw-b"),
    ({"sw-shape": "circle"}, "sw-shape"),
])
def test_bad_values_are_refused_naming_the_key(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _method(**values)
