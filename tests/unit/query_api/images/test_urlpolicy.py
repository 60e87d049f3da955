"""The address policy of searches by image URL: public addresses pass, any other only if
allowed by host name or network; IPv6 forms of IPv4 addresses are judged as those."""

from __future__ import annotations

from ipaddress import ip_address

import pytest
from pydantic import ValidationError

from core.settings_api import ApiSettings
from query_api.images.urlpolicy import AddressPolicy, kind_of


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "shared (carrier-grade NAT)"),
        ("100.127.255.254", "shared (carrier-grade NAT)"),
        ("224.0.0.251", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.7", "special-purpose"),  # documentation (TEST-NET-1)
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "unique-local"),
        ("fd12:3456::1", "unique-local"),
        ("ff0e::1", "multicast"),  # a global-scope multicast group is still multicast
        ("2001:db8::1", "special-purpose"),
        # IPv4 inside IPv6: mapped, 6to4 and NAT64 reach the IPv4 address they carry.
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.5", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:a00:1::", "private"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
    ],
)
def test_non_public_addresses_are_named_by_kind(address: str, kind: str) -> None:
    ip = ip_address(address)
    assert kind_of(ip) == kind
    refusal = AddressPolicy().refusal("photos.example", ip)
    assert refusal is not None and refusal.kind == kind


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "151.101.1.69", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::"],
)
def test_public_addresses_pass(address: str) -> None:
    assert kind_of(ip_address(address)) is None
    assert AddressPolicy().refusal("photos.example", ip_address(address)) is None


def test_the_refusal_says_the_kind_and_the_address() -> None:
    policy = AddressPolicy()
    assert str(policy.refusal("h", ip_address("10.0.0.5"))) == "a private address 10.0.0.5"
    assert str(policy.refusal("h", ip_address("::"))) == "an unspecified address ::"
    mapped = str(policy.refusal("h", ip_address("::ffff:127.0.0.1")))
    assert mapped.startswith("a loopback address ::ffff:") and mapped.endswith("(IPv4 127.0.0.1)")


def test_a_cidr_entry_allows_the_addresses_it_holds_and_no_other() -> None:
    policy = AddressPolicy(["10.1.0.0/16", "fd00:1::/32"])
    assert policy.refusal("any.name", ip_address("10.1.200.3")) is None
    assert policy.refusal("any.name", ip_address("fd00:1::9")) is None
    assert policy.refusal("any.name", ip_address("10.2.0.1")) is not None
    assert policy.refusal("any.name", ip_address("fd00:2::9")) is not None
    assert policy.refusal("any.name", ip_address("127.0.0.1")) is not None


def test_a_single_address_entry_is_a_host_route_and_covers_its_mapped_form() -> None:
    policy = AddressPolicy(["127.0.0.1"])
    assert policy.refusal("x", ip_address("127.0.0.1")) is None
    assert policy.refusal("x", ip_address("::ffff:127.0.0.1")) is None
    assert policy.refusal("x", ip_address("127.0.0.2")) is not None
    assert policy.refusal("x", ip_address("::1")) is not None


def test_a_host_entry_allows_that_name_whatever_it_resolves_to_and_no_other_name() -> None:
    policy = AddressPolicy(["Images.Internal."])
    for name in ("images.internal", "IMAGES.internal", "images.internal."):
        assert policy.refusal(name, ip_address("10.9.8.7")) is None
        assert policy.refusal(name, ip_address("::1")) is None
    # Not a suffix match, and the name's addresses are not allowed under another name.
    assert policy.refusal("cdn.images.internal", ip_address("10.9.8.7")) is not None
    assert policy.refusal("other.internal", ip_address("10.9.8.7")) is not None


def test_the_setting_takes_names_addresses_and_cidrs_and_refuses_anything_else() -> None:
    api = ApiSettings(image_url_allow=["LocalHost.", "127.0.0.1", "10.0.0.0/8", "fd00::/8"])
    assert api.image_url_allow == ("localhost", "127.0.0.1", "10.0.0.0/8", "fd00::/8")
    assert ApiSettings().image_url_allow == ()
    for bad in ("not a host", "http://images.internal", "10.0.0.0/33", "münchen.de"):
        with pytest.raises(ValidationError, match="image_url_allow"):
            ApiSettings(image_url_allow=[bad])
