"""Flower ClientApps and mods (thin adapters over fedpriv/).

* :class:`LdpMod` (``from clients import LdpMod``) — the drop-in local-DP mod for any ClientApp:
  ``ClientApp(mods=[LdpMod(perturbation="coordinatewise", mechanism="piecewise", epsilon=1.0, clip_norm=1.0)])``
  privatizes the model update of every train reply (any ArrayRecord layout, e.g. a torch ``state_dict``)
  against the model received; on fedpriv's own release contract it runs ``fedpriv.federated.local.finish_update``;
* :func:`clients.app.make_client_app` — fedpriv's ClientApp (one round of local LDP-SGD, replies with the
  release); ``clients.app:app`` for ``flwr run .``;
* :mod:`clients.contract` — the message keys both sides share.
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy), so a light submodule loads alone
    from clients.mods import LdpMod, ldp_mod

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = ["LdpMod", "ldp_mod"]
