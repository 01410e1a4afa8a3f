"""The [distribution] Flower twins under Flower's simulation engine (Ray): slow end-to-end tests.

* The one-round distribution query (square_wave_ems.md §12) over 8 SuperNodes releases exactly what
  :func:`fedpriv.estimation.query.run_query` releases.
* Online LDP-SGD (online_ldp_sgd.md §9), one client per round over 6 steps, follows exactly
  replication 0 of :func:`fedpriv.federated.online_sgd.simulate`.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulations.flower_engine import ray_backend_config

pytestmark = pytest.mark.slow


def test_online_sgd_under_run_simulation_equals_the_simulators_replication():
    from flwr.simulation import run_simulation

    from clients.online_sgd_app import make_online_sgd_client_app
    from fedpriv.federated.online_sgd import OnlineSgdConfig, simulate
    from strategies.online_sgd_app import OnlineSgdHolder, make_online_sgd_server_app

    cfg = OnlineSgdConfig(steps=6, replications=1, noise="laplace", epsilon=2.0, mu=None, theta0="uniform",
                          checkpoints=3, loss_samples=200, quantity_draws=2000, seed=8)
    holder = OnlineSgdHolder()
    run_simulation(
        server_app=make_online_sgd_server_app(cfg, holder, timeout=120.0),
        client_app=make_online_sgd_client_app(cfg),
        num_supernodes=cfg.steps,
        backend_config=ray_backend_config(),
    )
    assert holder.error is None, holder.error
    want = simulate(cfg)
    np.testing.assert_array_equal(holder.theta_sgd, want.theta_sgd[0])
    np.testing.assert_array_equal(holder.theta_asgd, want.theta_asgd[0])
    for field in ("param_error_sgd", "param_error_asgd", "loss_gap_sgd", "loss_gap_asgd", "beta_error_sgd"):
        np.testing.assert_array_equal(getattr(holder, field), getattr(want, field)[0], err_msg=field)
    totals = holder.ledger.totals()
    assert totals["epsilon_total_max"] == 2.0 and totals["rounds_recorded"] == cfg.steps
