"""Free ports for the servers a test starts, so parallel runs and leftovers never collide."""

from __future__ import annotations

import socket

from model.triton_server import Ports


def free_ports(count: int) -> list[int]:
    """Ports the OS just handed out, so parallel runs and leftover servers do not collide."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def triton_ports() -> Ports:
    http, grpc, metrics = free_ports(3)
    return Ports(http=http, grpc=grpc, metrics=metrics)
