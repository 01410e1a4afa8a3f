"""Deployment over gRPC (``fedpriv deploy``): a SuperLink and SuperNodes as real processes.

* :mod:`~simulations.deploy.certs` — CA, server certificate and SuperNode keys (``cryptography``);
* :mod:`~simulations.deploy.processes` — daemons as process groups, readiness, shutdown by PID;
* :mod:`~simulations.deploy.flwr_cli` — Flower's environment, ``config.toml``, daemon command lines;
* :mod:`~simulations.deploy.local` — :func:`deploy_local`, the whole federation on 127.0.0.1;
* :mod:`~simulations.deploy.hosts` — one SuperLink or one SuperNode per host (multi-host).
"""
