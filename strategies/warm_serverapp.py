"""The SuperLink's warm ServerApp launcher: each run's ``flwr-serverapp`` forked from a process with its libraries.

docs/deployment.md §12. The SuperLink (flwr 1.39) starts a fresh ``flwr-serverapp`` process for every
run, which imports Flower's ServerApp runtime, then the app, fedpriv and their libraries (numpy,
torch, dp-accounting, matplotlib): about 2.5 s before the run's first message, and more when it
draws its first plot. A launcher (:mod:`fedpriv.warm_launcher`) beside the SuperLink makes those
imports once; the SuperLink's ``flwr-serverapp`` is a shim (:func:`shim_script`) that hands each run
to it, and the launcher forks a child running Flower's own ``flwr-serverapp`` entry point with the
run's arguments. ``fedpriv deploy local``, whose SuperLink and nodes share one host, starts one
launcher for both (``--with-clientapps``): the node's ClientApps are forked from it too.

The ServerApp is the app bundle's code, which Flower unpacks and imports from the bundle's folder.
The launcher imports fedpriv's ServerApp to load the libraries it uses; each ServerApp child drops
the app's own packages (:data:`APP_PACKAGES`) right after the fork and imports them from its run's
bundle, as the cold process does, while the libraries stay loaded. Children teach the launcher
nothing: what a run imported after the fork came from its own bundle.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import clients.warm_clientapp as warm_clientapp
from fedpriv import warm_launcher

__all__ = ["APP_PACKAGES", "SOCKET_ENV", "TARGET", "main", "prewarm", "serve", "shim_script"]

#: The environment variable that gives the SuperLink's ``flwr-serverapp`` the launcher's socket.
SOCKET_ENV = "FEDPRIV_WARM_SERVERAPP"
#: The packages of fedpriv's app bundle: each run imports them from its bundle, never from the launcher.
APP_PACKAGES = ("fedpriv", "clients", "strategies", "simulations")
#: What each forked child runs: Flower's ``flwr-serverapp`` command, which loads the run's ServerApp from its bundle.
TARGET = warm_launcher.Target(command="flwr-serverapp", module="flwr.superlink.cli.flwr_serverapp",
                              function="flwr_serverapp", socket_env=SOCKET_ENV, label="ServerApp",
                              forget=APP_PACKAGES)
#: Libraries a ServerApp imports through fedpriv: dp-accounting (its PLD accountant imports scipy.signal), torch,
#: and matplotlib's pyplot for the run's plots (on the Agg backend, as fedpriv's plots draw).
_HEAVY = ("dp_accounting", "torch", "matplotlib.pyplot")


def prewarm() -> None:
    """Import Flower's ServerApp runtime, fedpriv's ServerApp with every workload, and :data:`_HEAVY`."""
    import matplotlib

    matplotlib.use("Agg")
    warm_launcher.preimport(["flwr.superlink.cli.flwr_serverapp", "flwr.superlink.runtime.run_serverapp",
                             "strategies.server_app", *_HEAVY])


def shim_script(cold: str) -> str:
    """The SuperLink's ``flwr-serverapp``: each run forked from the launcher, else Flower's command ``cold``."""
    return warm_launcher.shim_script(TARGET.command, SOCKET_ENV, [cold])


def serve(path: Path, parent_pid: int, *, clientapps: bool = False) -> NoReturn:
    """Import the ServerApp's libraries, then fork a ``flwr-serverapp`` per request on ``path`` until ``parent_pid``
    exits; with ``clientapps``, also the ClientApps of this host's nodes (:mod:`clients.warm_clientapp`)."""
    targets, steps = [TARGET], [prewarm]
    if clientapps:
        targets.append(warm_clientapp.TARGET)
        steps.append(warm_clientapp.prewarm)
    warm_launcher.serve(path, parent_pid, targets, steps)


def main() -> None:
    """``python -m strategies.warm_serverapp serve SOCKET PARENT_PID [--with-clientapps]``: the launcher."""
    args = sys.argv[1:]
    clientapps = args[3:] == ["--with-clientapps"]
    if len(args) not in (3, 4) or args[0] != "serve" or not args[2].isdigit() or (len(args) == 4 and not clientapps):
        sys.exit("usage: python -m strategies.warm_serverapp serve SOCKET PARENT_PID [--with-clientapps]")
    serve(Path(args[1]), int(args[2]), clientapps=clientapps)


if __name__ == "__main__":
    main()
