"""API keys: configured as SHA-256 hashes with scopes; who called is counted per key name."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from core.settings_api import ApiKey

ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Caller:
    """Who made a request, and what it may do."""

    name: str
    scopes: frozenset[str]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A random key to hand to an internal application (256 bits, URL-safe)."""
    return "ps_" + secrets.token_urlsafe(32)


class KeyRing:
    """The configured keys, looked up by the hash of what a caller presents.

    Only hashes are configured, so a leaked configuration does not leak keys; a lookup by
    hash is safe against timing because an attacker cannot choose a hash's preimage.
    """

    def __init__(self, keys: tuple[ApiKey, ...], anonymous_search: bool) -> None:
        self._by_hash = {k.sha256: Caller(k.name, frozenset(k.scopes)) for k in keys}
        self.anonymous = Caller(ANONYMOUS, frozenset({"search"} if anonymous_search else ()))

    def identify(self, presented: str | None) -> Caller | None:
        """The caller of a key; the anonymous caller without one; None for an unknown key."""
        if presented is None:
            return self.anonymous
        return self._by_hash.get(hash_key(presented))


def presented_key(x_api_key: str | None, authorization: str | None) -> str | None:
    """The key from `X-API-Key`, or from `Authorization: Bearer <key>`."""
    if x_api_key:
        return x_api_key.strip()
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip() or None
    return None
