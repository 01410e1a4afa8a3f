"""The robust rules in a run: the setup refuses a sample too small for ``num-malicious``, a round whose valid
replies break the rule's assumption stops the run, and centered clipping's start point survives a resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedpriv.workloads.ldp_sgd.client as fast_engine
from fedpriv.config import RunConfig
from fedpriv.workloads.ldp_sgd.workload import LdpSgd
from simulations.runner import run

CFG = RunConfig.from_mapping({"num-clients": 6, "rounds": 2, "local-steps": 2, "min-clients": 3,
                              "perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 5.0,
                              "noise-schedule": "last_step"})


@pytest.mark.parametrize(
    "keys, match",
    [
        ({"strategy": "bulyan", "num-malicious": 1},
         r"bulyan with num-malicious=1 needs at least 4\*num_malicious \+ 3 = 7 updates, got 6 sampled per round "
         r"\(num-clients=6, fraction-train=1, min-clients=3\)"),
        ({"strategy": "krum", "num-malicious": 1, "fraction-train": 0.5},  # ceil(0.5 · 6) = 3 sampled
         r"krum with num-malicious=1 needs more than 2\*num_malicious \+ 2 = 4 updates, got 3 sampled per round"),
        ({"strategy": "fedtrimmedavg", "num-malicious": 2}, r"floor\(0.2 \* 6\) = 1"),
        ({"strategy": "centeredclip", "num-malicious": 3}, "centeredclip with num-malicious=3 needs an honest majority"),
    ],
)
def test_setup_refuses_a_sample_the_rule_cannot_defend(keys, match):
    with pytest.raises(ValueError, match=match):
        LdpSgd().setup(CFG.replace(**{k.replace("-", "_"): v for k, v in keys.items()}))


def test_setup_accepts_the_boundary():
    LdpSgd().setup(CFG.replace(num_clients=7, strategy="bulyan", num_malicious=1))


def test_drop_outs_that_break_the_assumption_stop_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = fast_engine.local_update

    def local_update(*args, **kwargs):
        if kwargs["server_round"] == 2 and kwargs["client_id"] in (0, 1):
            raise RuntimeError("dropped out")
        return real(*args, **kwargs)

    monkeypatch.setattr(fast_engine, "local_update", local_update)
    cfg = CFG.replace(strategy="fedmedian", num_malicious=2)  # 6 sampled > 2f = 4; round 2 has 4 valid replies
    result = run(cfg, engine="fast", root=tmp_path)
    assert result.summary["status"] == "failed"
    assert ("round 2: fedmedian with num-malicious=2 needs an honest majority, 2*num_malicious < updates, i.e. more "
            "than 4 updates, got 4 valid replies (2 failed, 0 rejected)") in result.summary["error"]
    assert [r["round"] for r in result.rounds] == [1]


def test_centered_clipping_resumes_from_the_committed_start_point(tmp_path: Path) -> None:
    cfg = CFG.replace(strategy="centeredclip", num_malicious=1, cc_tau=0.05, cc_iters=2)
    whole = run(cfg.replace(rounds=3), engine="fast", root=tmp_path / "whole")
    first = run(cfg, engine="fast", root=tmp_path / "first")
    resumed = run(cfg.replace(rounds=3), engine="fast", root=tmp_path / "resumed", resume=first.directory, fork=True)
    assert resumed.summary["status"] == "finished"
    np.testing.assert_array_equal(resumed.params, whole.params)
