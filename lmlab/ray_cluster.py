"""Joining the Ray cluster at RAY_ADDRESS, for whatever lmlab hands to Ray (lmlab compare
--cluster ray, lmlab prepare --executor ray).

Never Ray's "auto" search: on a shared machine it can find someone else's cluster, or wait many
minutes for one that is gone; and an address where nothing listens is asked first, since
ray.init waits many minutes there too (820 s measured) before it fails.
"""

from __future__ import annotations

import os
import socket


def connect(needed_by: str, **init) -> None:
    """ray.init(`init`) on the cluster at RAY_ADDRESS; ConnectionError in one line naming
    `needed_by` when there is none."""
    import ray

    address = os.environ.get("RAY_ADDRESS")
    if not address:
        raise ConnectionError(f"{needed_by} needs RAY_ADDRESS, the address of the cluster's "
                              "head node (`ray start --head` prints it)")
    host, _, port = address.rpartition(":")
    if port.isdigit():
        try:
            socket.create_connection((host.rpartition("://")[2], int(port)), timeout=10).close()
        except OSError as error:
            raise ConnectionError(f"{needed_by}: no Ray cluster answers at {address} "
                                  f"(RAY_ADDRESS): {error.strerror or error}") from None
    ray.init(address=address, **init)
