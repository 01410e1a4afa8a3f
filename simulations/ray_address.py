"""The check of a Ray cluster address, before anything waits on it (``fedpriv compare`` and ``fedpriv run --ray-address``)."""

from __future__ import annotations

import socket

__all__ = ["CONNECT_TIMEOUT", "check_ray_address"]

#: Seconds to wait for the cluster's port to accept a connection before giving up on an address.
CONNECT_TIMEOUT = 5.0


def check_ray_address(address: str) -> None:
    """Refuse, naming it, a Ray cluster address that is malformed or where nothing accepts connections.

    ``ray.init`` retries an unreachable address for minutes (and a Flower simulation would wait for its
    clients forever), so the head's port is tried once here first.
    """
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    hint = ("give the head's GCS address (host:port, from `ray start --head --port PORT`) or its Ray Client "
            "address (ray://host:10001)")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--ray-address must be host:port or ray://host:port, got {address!r}: {hint}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise ConnectionError(f"--ray-address {address!r}: no Ray cluster answers there ({exc.strerror or exc}); "
                              f"{hint}") from None
