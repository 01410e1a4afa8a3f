"""The ClientApp process of a fedpriv node: Flower's ``flwr-clientapp``, running the node's own installed fedpriv.

docs/threat_model.md §2. A SuperNode runs each message in a fresh ``flwr-clientapp`` process, which
loads the ClientApp that the app bundle (FAB) names, with the bundle's folder first on the import
path. The bundle comes from the SuperLink, i.e. from the server: without a check, the server could
ship its own ``clients/app.py`` and the node's policy would run inside the server's code (flwr 1.39
verifies bundle signatures only for apps from Flower Hub: docs/deployment.md §10).

The nodes ``fedpriv deploy`` starts launch this module in place of ``flwr-clientapp``
(:func:`simulations.deploy.flwr_cli.node_clientapp_env`): it is Flower's process in every respect
(the runtime API, the token, the message, the context) except what it runs — always
``clients.app:app`` from the fedpriv installed on the node, whatever ClientApp the bundle names, and
never anything from the bundle: it is not unpacked (Flower would extract it into the node's
``FLWR_HOME`` for every message, about half a second each, only for this process to ignore it) and
nothing of it is put on the import path.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flwr.clientapp import ClientApp

__all__ = ["load_installed_client_app", "main", "skip_fab_install"]

#: The ClientApp a fedpriv node runs.
CLIENT_APP = "clients.app:app"


def load_installed_client_app(default_app_ref: str, app_path: str | None,
                              multi_app: bool) -> Callable[[str, str, str], ClientApp]:
    """Flower's ``get_load_client_app_fn`` for a fedpriv node: whatever the bundle names, fedpriv's installed app."""
    from flwr.supercore import log

    def load(fab_id: str, fab_version: str, fab_hash: str) -> ClientApp:
        from clients.app import app

        log(INFO, "fedpriv node: running its installed %s for app %s %s (the app bundle's own code is not run)",
            CLIENT_APP, fab_id, fab_version)
        return app

    return load


def skip_fab_install(fab_file: Any, skip_prompt: bool = False, **_: Any) -> None:
    """Flower's ``install_from_fab`` for a fedpriv node: the bundle is not unpacked, its code is never run."""
    from flwr.supercore import log

    log(INFO, "fedpriv node: the app bundle is not unpacked (%d bytes)", len(fab_file) if isinstance(fab_file, bytes) else -1)


def main() -> None:
    """Run ``flwr-clientapp`` with the node's installed fedpriv ClientApp (module docstring)."""
    import flwr.supernode.runtime.run_clientapp as run_clientapp
    from flwr.supernode.cli.flwr_clientapp import flwr_clientapp

    run_clientapp.get_load_client_app_fn = load_installed_client_app
    # Flower's install_from_fab returns the folder it unpacked into, which run_clientapp discards; this
    # stand-in unpacks nothing, so it has no folder to return.
    run_clientapp.install_from_fab = skip_fab_install  # type: ignore[assignment]
    flwr_clientapp()


if __name__ == "__main__":
    main()
