"""The client's address: the load balancer's header believed only from a trusted proxy, and
then only what trusted proxies appended to it."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from query_api.http.clientaddress import client_address, parse_address

LB = [ip_network("10.0.0.0/24"), ip_network("fd00::/64")]


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        # The header from a peer that is not a trusted proxy is the client's own writing.
        ("203.0.113.5", ["198.51.100.1"], "203.0.113.5"),
        # From the load balancer: the address it appended.
        ("10.0.0.2", ["198.51.100.1"], "198.51.100.1"),
        # What the client wrote itself stands left of it, and is not believed.
        ("10.0.0.2", ["1.2.3.4, 198.51.100.1"], "198.51.100.1"),
        # Two trusted hops (an edge proxy, then the balancer): the first untrusted from the right.
        ("10.0.0.2", ["1.2.3.4, 198.51.100.1, 10.0.0.7"], "198.51.100.1"),
        # The header in several lines reads as one list, in order.
        ("10.0.0.2", ["1.2.3.4", "198.51.100.1"], "198.51.100.1"),
        # Ports and brackets, as some proxies write them; IPv6 peers.
        ("10.0.0.2", ["198.51.100.1:5443"], "198.51.100.1"),
        ("fd00::2", ["[2001:db8::1]:443"], "2001:db8::1"),
        ("::ffff:10.0.0.2", ["2001:db8::1"], "2001:db8::1"),
        # A hop that is not an address: the proxy that wrote it is all that is known.
        ("10.0.0.2", ["1.2.3.4, unknown"], "10.0.0.2"),
        ("10.0.0.2", ["198.51.100.1, unknown, 10.0.0.7"], "10.0.0.7"),
        # Every hop a trusted proxy's: the farthest of them called.
        ("10.0.0.2", ["10.0.0.9, 10.0.0.7"], "10.0.0.9"),
        # No header: the peer.
        ("10.0.0.2", [], "10.0.0.2"),
    ],
)
def test_the_client_is_the_rightmost_address_no_trusted_proxy_wrote(
    peer: str, forwarded: list[str], client: str
) -> None:
    assert client_address(peer, forwarded, LB) == client


def test_without_trusted_proxies_every_header_is_ignored() -> None:
    assert client_address("10.0.0.2", ["198.51.100.1"], []) == "10.0.0.2"
    assert client_address(None, ["198.51.100.1"], LB) is None


def test_addresses_are_parsed_as_proxies_write_them() -> None:
    assert str(parse_address(" 192.0.2.1 ")) == "192.0.2.1"
    assert str(parse_address("192.0.2.1:80")) == "192.0.2.1"
    assert str(parse_address("[2001:db8::1]")) == "2001:db8::1"
    assert str(parse_address("2001:db8::1")) == "2001:db8::1"
    assert parse_address("unknown") is None
    assert parse_address("") is None
