"""Who is calling: the client's address, from the load balancer's header when the connection
comes from one of PHOTOSEARCH_API__TRUSTED_PROXIES, else the connection's own peer.

Each proxy appends the address it was called from to X-Forwarded-For, after whatever the
client wrote there itself: only the addresses that trusted proxies appended are believed,
so the client's is the right-most one that is not a trusted proxy's. (uvicorn's own proxy
headers are off: with FORWARDED_ALLOW_IPS=* they took the left-most, which the client writes.)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_address(text: str) -> IPAddress | None:
    """An address as proxies write one: bare, `1.2.3.4:port` or `[2001:db8::1]:port`."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: IPAddress, proxies: Sequence[IPNetwork]) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in proxies)


def client_address(
    peer: str | None, forwarded: Sequence[str], proxies: Sequence[IPNetwork]
) -> str | None:
    """The client's address: `peer` (the connection's) unless it is a trusted proxy's, then
    the right-most address of the `forwarded` header values that is not a trusted proxy's.

    A hop that is not an address stops the walk at the proxy that wrote it; when every hop is
    a trusted proxy's, the farthest of them is the caller.
    """
    address = parse_address(peer) if peer else None
    if address is None or not forwarded or not _trusted(address, proxies):
        return peer
    nearest = str(address)
    hops = [hop for value in forwarded for hop in value.split(",")]
    for hop in reversed(hops):
        found = parse_address(hop)
        if found is None:
            return nearest
        if not _trusted(found, proxies):
            return str(found)
        nearest = str(found)
    return nearest


class ClientAddress:
    """Puts the client's address in the request's `client`, where everything after it (the
    rate limits, uvicorn's access log) reads it."""

    def __init__(self, app: ASGIApp, proxies: Sequence[IPNetwork], header: str) -> None:
        self.app = app
        self.proxies = tuple(proxies)
        self.header = header.lower().encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.proxies:
            client = scope.get("client")
            peer = client[0] if client else None
            values = [v.decode("latin-1") for n, v in scope["headers"] if n == self.header]
            found = client_address(peer, values, self.proxies)
            if found != peer:
                scope["client"] = (found, 0)
        await self.app(scope, receive, send)
