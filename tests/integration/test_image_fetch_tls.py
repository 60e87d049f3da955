"""An https image URL is fetched from the address that was checked, yet the TLS server name
and the certificate check are the URL's host name: pinning the address loses neither."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Iterator
from ipaddress import ip_address
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from query_api.images.fetch import FetchError, ImageFetcher, open_client
from query_api.images.urlpolicy import AddressPolicy
from tests.support.imagehost import ImageHost
from tests.support.images import encode, photo

IMAGE = encode(photo("coffee").resize((64, 64)), "JPEG")


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


class Authority:
    """A certificate authority of the test's own, and certificates it signs."""

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("PhotoSearch test CA"))
            .issuer_name(_name("PhotoSearch test CA"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def server_context(self, folder: Path, *names: str) -> ssl.SSLContext:
        """A server's TLS context with a certificate for `names` (DNS names or addresses)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alternatives: list[x509.GeneralName] = []
        for name in names:
            try:
                alternatives.append(x509.IPAddress(ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(names[0]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        cert_file, key_file = folder / f"{names[0]}.pem", folder / f"{names[0]}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_file, key_file)
        return context


@pytest.fixture(scope="module")
def ca() -> Authority:
    return Authority()


@pytest.fixture
def trusting(ca: Authority) -> Iterator[ssl.SSLContext]:
    """A client context that trusts the test CA alone."""
    yield ssl.create_default_context(cadata=ca.pem())


def fetcher(trust: ssl.SSLContext, allow: list[str]) -> ImageFetcher:
    return ImageFetcher(
        open_client(10.0, verify=trust),
        AddressPolicy(allow),
        max_bytes=1_000_000,
        timeout_s=10.0,
    )


async def test_https_sends_the_host_name_as_sni_and_host_while_connecting_to_the_address(
    ca: Authority, trusting: ssl.SSLContext, tmp_path: Path
) -> None:
    with ImageHost(IMAGE, tls=ca.server_context(tmp_path, "localhost")) as host:
        fetch = fetcher(trusting, ["localhost"])
        try:
            data = await fetch.fetch(f"https://localhost:{host.port}/photo.jpg")
        finally:
            await fetch.aclose()
    assert data == IMAGE
    assert host.server_names == ["localhost"]
    assert [s.host for s in host.seen] == [f"localhost:{host.port}"]


async def test_a_certificate_for_another_name_is_refused_though_the_address_matches(
    ca: Authority, trusting: ssl.SSLContext, tmp_path: Path
) -> None:
    # Valid for 127.0.0.1 (the address connected to) and another name, not for localhost.
    context = ca.server_context(tmp_path, "images.other.test", "127.0.0.1")
    with ImageHost(IMAGE, tls=context) as host:
        fetch = fetcher(trusting, ["localhost"])
        try:
            with pytest.raises(FetchError) as refused:
                await fetch.fetch(f"https://localhost:{host.port}/photo.jpg")
        finally:
            await fetch.aclose()
    assert refused.value.status == 502 and refused.value.outcome == "upstream_error"
    assert "not valid for 'localhost'" in refused.value.message, refused.value.message
    assert host.seen == []  # no request went over the unverified connection


async def test_a_certificate_from_an_unknown_authority_is_refused(
    ca: Authority, tmp_path: Path
) -> None:
    with ImageHost(IMAGE, tls=ca.server_context(tmp_path, "localhost")) as host:
        fetch = fetcher(ssl.create_default_context(), ["localhost"])  # the system's CAs
        try:
            with pytest.raises(FetchError) as refused:
                await fetch.fetch(f"https://localhost:{host.port}/photo.jpg")
        finally:
            await fetch.aclose()
    assert refused.value.status == 502
    assert "certificate" in refused.value.message.lower(), refused.value.message
