"""Which addresses a search by image URL may reach: public ones, and those the operator allows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

_PRIVATE = tuple(ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_SHARED = ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)
_UNIQUE_LOCAL = ip_network("fc00::/7")
# NAT64's well-known prefix (RFC 6052) carries an IPv4 address in its last 32 bits: on a
# NAT64 network, 64:ff9b::a00:1 reaches 10.0.0.1.
_NAT64 = ip_network("64:ff9b::/96")


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (IPv4-mapped, 6to4, NAT64), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def kind_of(address: Address) -> str | None:
    """What kind of non-public address this is ("loopback", "private", ...); None if public.

    Python's `is_global` alone is not enough: it calls multicast addresses global.
    """
    if isinstance(address, IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            # A public IPv4 address reached through IPv6 is still public.
            return kind_of(inner)
    checks: tuple[tuple[str, bool], ...] = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", any(address in n for n in _PRIVATE)),
        ("shared (carrier-grade NAT)", address in _SHARED),
        ("unique-local", address in _UNIQUE_LOCAL),
        ("site-local", isinstance(address, IPv6Address) and address.is_site_local),
        ("reserved", address.is_reserved),
        # The rest of the special-purpose registries: documentation, benchmarking, ...
        ("special-purpose", not address.is_global),
    )
    return next((kind for kind, found in checks if found), None)


@dataclass(frozen=True)
class Refusal:
    """Why an address may not be fetched from."""

    kind: str
    address: Address

    def __str__(self) -> str:
        """As in "resolves to a private address 10.0.0.5"."""
        article = "an" if self.kind == "unspecified" else "a"  # the only one said with a vowel
        text = f"{article} {self.kind} address {self.address}"
        inner = embedded_ipv4(self.address) if isinstance(self.address, IPv6Address) else None
        return f"{text} (IPv4 {inner})" if inner is not None else text


class AddressPolicy:
    """Public addresses pass; any other only if its host name or a network holding it is
    allowed (PHOTOSEARCH_API__IMAGE_URL_ALLOW)."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        hosts: set[str] = set()
        networks: list[Network] = []
        for entry in allow:
            value = entry.strip().lower().rstrip(".")
            try:
                networks.append(ip_network(value, strict=False))
            except ValueError:
                hosts.add(value)
        self.hosts = frozenset(hosts)
        self.networks = tuple(networks)

    def refusal(self, host: str, address: Address) -> Refusal | None:
        """Why `address`, which `host` resolved to, may not be fetched from; None if it may."""
        kind = kind_of(address)
        if kind is None or host.lower().rstrip(".") in self.hosts:
            return None
        inner = embedded_ipv4(address) if isinstance(address, IPv6Address) else None
        for network in self.networks:
            if address in network or (inner is not None and inner in network):
                return None
        return Refusal(kind, address)


def parse_address(text: str) -> Address | None:
    """An IP address literal (no brackets), or None if `text` is not one."""
    try:
        return ip_address(text)
    except ValueError:
        return None
