"""A node's warm ClientApp launcher: each message's ClientApp process forked from one that has imported fedpriv.

docs/deployment.md §12. A SuperNode (flwr 1.39) starts a fresh ``flwr-clientapp`` process for every
message; importing Flower, fedpriv and the workloads' libraries costs that process seconds of CPU
before it reads the message (``benchmarks/node_import_bench.py``). The nodes ``fedpriv deploy``
starts get a launcher (:mod:`fedpriv.warm_launcher`) beside their SuperExec (:func:`serve`; one per
node for ``fedpriv deploy supernode``, one for all the nodes of ``fedpriv deploy local``): it imports
Flower's ClientApp runtime, fedpriv's app, the workloads and their heavy libraries once. The node's
``flwr-clientapp`` (a shim, :func:`shim_script`) hands its request to the launcher, which forks a
child that runs :func:`clients.node_clientapp.main`, the node's installed ClientApp; without a
launcher the shim runs ``python -m clients.node_clientapp`` cold. Each child reports the modules it
imported, and the launcher imports them between messages, so from a node's second message on its
ClientApp processes start with everything they need already imported.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from fedpriv import warm_launcher

__all__ = ["SOCKET_ENV", "TARGET", "main", "prewarm", "serve", "shim_script"]

#: The environment variable that gives a node's ``flwr-clientapp`` the launcher's socket.
SOCKET_ENV = "FEDPRIV_WARM_CLIENTAPP"
#: What each forked child runs: the node's installed ClientApp, as Flower's ``flwr-clientapp`` command.
TARGET = warm_launcher.Target(command="flwr-clientapp", module="clients.node_clientapp", function="main",
                              socket_env=SOCKET_ENV, label="ClientApp", learn=True)


#: Libraries the workloads' clients import on first use, heavy enough that every process importing them at once
#: is felt: dp-accounting (its PLD accountant imports scipy.signal, about 4 s of CPU) and torch.
_HEAVY = ("dp_accounting", "torch")


def prewarm() -> None:
    """Import what the ClientApp processes import: Flower's ClientApp runtime, fedpriv's app, every registered
    workload and the heavy libraries of :data:`_HEAVY`."""
    warm_launcher.preimport(["flwr.supernode.cli.flwr_clientapp", "flwr.supernode.runtime.run_clientapp",
                             "clients.app", "clients.node_clientapp", *_HEAVY])


def shim_script() -> str:
    """The node's ``flwr-clientapp``: its message forked from the launcher, else ``python -m clients.node_clientapp``."""
    return warm_launcher.shim_script(TARGET.command, SOCKET_ENV, [sys.executable, "-m", "clients.node_clientapp"])


def serve(path: Path, parent_pid: int) -> NoReturn:
    """Import fedpriv, then fork a ClientApp process per request on the socket ``path`` until ``parent_pid`` exits."""
    warm_launcher.serve(path, parent_pid, [TARGET], [prewarm])


def main() -> None:
    """``python -m clients.warm_clientapp serve SOCKET PARENT_PID``: the launcher."""
    if len(sys.argv) != 4 or sys.argv[1] != "serve" or not sys.argv[3].isdigit():
        sys.exit("usage: python -m clients.warm_clientapp serve SOCKET PARENT_PID")
    serve(Path(sys.argv[2]), int(sys.argv[3]))


if __name__ == "__main__":
    main()
