"""The standalone example app (examples/quickstart-ldp): a usual Flower app plus LdpMod and LdpFedAvg."""

from __future__ import annotations

import math
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simulations.flower_engine as flower_engine
from clients import LdpMod
from fedpriv.node.policy import NodePolicy

APP_DIR = Path(__file__).resolve().parents[2] / "examples" / "quickstart-ldp"
NUM_CLIENTS = 3


@pytest.fixture(scope="module", autouse=True)
def _example_on_path() -> Iterator[None]:
    sys.path.insert(0, str(APP_DIR))  # Ray's actors get the driver's sys.path
    yield
    sys.path.remove(str(APP_DIR))


def _run(num_rounds: int, **mod: Any) -> Any:
    """Flower's Result of the example under run_simulation with ``LdpMod(**mod)`` on every client.

    A simulation: the mod runs under the simulation policy, which allows its seed and the clean baseline
    (``perturbation = "none"``); the example's own mod runs under the node's default policy.
    """
    from flwr.simulation import run_simulation
    from quickstart_ldp.client_app import make_client_app
    from quickstart_ldp.server_app import make_server_app

    holder: dict[str, Any] = {}
    run_simulation(server_app=make_server_app(holder, num_rounds=num_rounds),
                   client_app=make_client_app(LdpMod(**mod, policy=NodePolicy.simulation())), num_supernodes=NUM_CLIENTS,
                   backend_config=flower_engine.ray_backend_config())  # the tests' shared Ray (tests/conftest.py)
    return holder["result"]


def test_the_apps_pyproject_names_its_components() -> None:
    flwr = tomllib.loads((APP_DIR / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    from quickstart_ldp import client_app, server_app

    assert flwr["components"] == {"serverapp": "quickstart_ldp.server_app:app",
                                  "clientapp": "quickstart_ldp.client_app:app"}
    assert client_app.DEFAULT_MOD["perturbation"] != "none" and server_app.app is not None


@pytest.mark.slow(reason="two Flower simulations of one round (their ClientApps in Ray actors)")
@pytest.mark.subprocess
def test_noise_is_added_with_the_mechanisms_magnitude_and_the_state_dict_round_trips() -> None:
    """One round, 3 clients, with and without noise: the same clipped updates (same seeds, same training), so
    noisy − clean aggregate = Σ_k w_k n_k, the weighted noise of the clients.

    Coordinatewise Laplace at ε per update (split over d coordinates, each scaled by √d/C into [-1, 1],
    sensitivity 2) has per-coordinate variance σ² = 8·d·C²/ε² in model units. The shards are equal (449
    examples each), so w_k = 1/3 and the aggregate's variance is σ²/3; a sum of 3 i.i.d. Laplace has kurtosis
    κ = 3 + 3/3 = 4. CLT over the d coordinates, 5 standard errors: |mean| < 5·σ_a/√d and
    |s² − σ_a²| < 5·σ_a²·√((κ − 1)/d). The float32 model arrays round values of size ~σ_a ≈ 9 with relative
    error 6e-8, far below either tolerance.
    """
    from quickstart_ldp.task import new_model

    eps, c = 10.0, 1.0
    clean = _run(1, perturbation="none", clip_norm=c)
    noisy = _run(1, perturbation="coordinatewise", mechanism="laplace", epsilon=eps, clip_norm=c, seed=1)
    layout = new_model().state_dict()
    for result in (clean, noisy):
        assert list(result.arrays.keys()) == list(layout)  # the state_dict layout round-trips
        new_model().load_state_dict(result.arrays.to_torch_state_dict())
    z = np.concatenate([noisy.arrays[k].numpy().astype(np.float64).ravel() - clean.arrays[k].numpy().ravel()
                        for k in layout])
    d = z.size
    assert d == 3350
    var = 8 * d * c**2 / eps**2 / NUM_CLIENTS
    assert abs(z.mean()) < 5 * math.sqrt(var / d)
    assert abs(z.var() - var) < 5 * var * math.sqrt(3 / d), (z.var(), var)
    # the server evaluated the initial and the trained model
    accuracies = {r: m["test-accuracy"] for r, m in clean.evaluate_metrics_serverapp.items()}
    assert set(accuracies) == {0, 1}
