"""Flower ClientApps and mods (thin adapters over fedpriv/).

* :func:`clients.app.make_client_app` — the ClientApp (one round of local LDP-SGD, replies with the
  release); ``clients.app:app`` for ``flwr run .``;
* :class:`clients.mods.LdpMod` — privatizes the release with ``fedpriv.federated.local.finish_update``;
* :mod:`clients.contract` — the message keys both sides share.
"""
