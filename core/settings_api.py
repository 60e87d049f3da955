"""The query API's settings (PHOTOSEARCH_API__*): access, limits on input, the query cache,
the deadlines it keeps; a part of the one tree in core/settings.py, apart only for its size."""

from __future__ import annotations

import re
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

__all__ = ["HOST_NAME", "ApiKey", "ApiSettings"]

# A DNS name: dot-separated labels of letters, digits, hyphens (and underscores, which some
# internal names carry), each 1-63 long and not starting or ending with a hyphen.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


class ApiKey(BaseModel):
    """One caller of the API: a name for the metrics, the SHA-256 of its key, its scopes."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the key")
    scopes: tuple[Literal["search", "admin"], ...] = ("search",)
    rate_per_s: float | None = Field(
        None, gt=0, description="searches a second on average (the bucket's refill); unset: none"
    )
    burst: int | None = Field(
        None, ge=1, description="searches at once (the bucket's size); unset: ceil(rate_per_s)"
    )

    @model_validator(mode="after")
    def _burst_needs_a_rate(self) -> ApiKey:
        if self.burst is not None and self.rate_per_s is None:
            raise ValueError(f"key {self.name!r}: burst needs rate_per_s")
        return self


class ApiSettings(BaseModel):
    """The query API: access, limits on input, the query cache and the deadlines it keeps."""

    host: str = Field("127.0.0.1", description="Address `photosearch api` listens on.")
    port: int = Field(8000, ge=1, le=65535, description="Port of the API and the search page.")
    metrics_host: str = Field(
        "127.0.0.1", description="Address of the internal /metrics listener (never public)."
    )
    metrics_port: int = Field(
        9465,
        ge=0,
        le=65535,
        description="Port of the internal /metrics listener, apart from the API's; 0: none.",
    )
    docs: bool = Field(
        False,
        description="Serve /docs (Swagger UI from the app's own files) and /openapi.json.",
    )
    keys: tuple[ApiKey, ...] = Field(
        (),
        description='Callers as JSON: [{"name": "app", "sha256": "<hex>", "scopes": '
        '["search"]}]; `photosearch api key NAME` makes one. A key\'s searches are limited '
        'with "rate_per_s" (a second, on average) and "burst" (at once; default: the rate '
        "rounded up); keys of one name share one limit.",
    )
    anonymous_search: bool = Field(
        False, description="Let callers without a key search (the public page)."
    )
    # A person on the page submits a search every few seconds at most ("more", "more like
    # this" included); 20 at once absorbs quick clicking, and 5 a second leaves room for a few
    # dozen people behind one NAT while a script on one address gets 5 searches a second.
    anonymous_rate_per_s: float = Field(
        5.0,
        ge=0,
        description="Searches a second one client address may make without a key, on average "
        "(IPv6: one /64); 0: no limit.",
    )
    anonymous_burst: int = Field(
        20, ge=1, description="Searches one client address may make at once without a key."
    )
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...] = Field(
        (),
        description='The load balancers (JSON list of addresses or CIDRs: ["10.0.0.0/8"]) '
        "whose CLIENT_ADDRESS_HEADER is believed; empty: the connection's peer is the client.",
    )
    client_address_header: str = Field(
        "X-Forwarded-For",
        pattern=r"^[A-Za-z0-9-]+$",
        description="Header in which TRUSTED_PROXIES name the client; its right-most address "
        "not of a trusted proxy is the client's.",
    )

    @model_validator(mode="after")
    def _one_limit_per_name(self) -> ApiSettings:
        limits: dict[str, tuple[float | None, int | None]] = {}
        for key in self.keys:
            limit = limits.setdefault(key.name, (key.rate_per_s, key.burst))
            if limit != (key.rate_per_s, key.burst):
                raise ValueError(f"the keys named {key.name!r} share one limit: give it once")
        return self

    cache_ttl_s: int = Field(
        7 * 86400, ge=1, description="How long a query embedding stays in the Redis cache."
    )
    popular_days: int = Field(
        7, ge=1, le=90, description="Days of queries counted for the pre-warm before a switch."
    )
    prewarm_queries: int = Field(
        1000, ge=0, description="Most popular recent queries embedded before a reindex switches."
    )
    max_upload_bytes: int = Field(
        10 * 1024 * 1024, ge=1, description="Largest image accepted by image search."
    )
    # CLIP sees 224x224 pixels: a 12-megapixel phone photo is plenty to search with.
    max_upload_pixels: int = Field(
        12_000_000, ge=1, description="Most pixels of an image accepted by image search."
    )
    # An image search by URL makes this server fetch from the network: by default only public
    # addresses, so a caller cannot make it reach the cluster, the cloud's metadata service
    # (169.254.169.254) or anything else behind the firewall.
    image_url_allow: tuple[str, ...] = Field(
        (),
        description="Hosts an image search by URL may fetch from although they are not "
        'public: a JSON list of host names and addresses or CIDRs (["images.internal", '
        '"10.1.0.0/16"]); empty: public addresses only.',
    )
    image_url_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Deadline of fetching an image by URL: resolving, connecting, every "
        "redirect and the whole body (504 past it).",
    )
    # The fetches share one pool per replica: a caller pointing at a slow server would
    # otherwise hold all of it for the deadline's length, and every other caller wait.
    image_url_per_caller: int = Field(
        4,
        ge=1,
        description="Fetches by URL one caller (an API key, or an address without one) may "
        "have in flight on a replica; more get 429.",
    )

    @field_validator("image_url_allow")
    @classmethod
    def _hosts_or_networks(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        # Checked here, so a typo fails at startup instead of silently allowing nothing.
        normalized = []
        for entry in entries:
            value = entry.strip().lower().rstrip(".")
            try:
                ip_network(value, strict=False)
            except ValueError:
                if not HOST_NAME.fullmatch(value):
                    raise ValueError(
                        f"image_url_allow: {entry!r} is neither a host name (ASCII; xn-- for "
                        "an international one) nor an address or CIDR"
                    ) from None
            normalized.append(value)
        return tuple(normalized)

    max_json_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest JSON body (searches and admin calls)."
    )
    image_threads: int = Field(
        2, ge=1, description="Threads reading and decoding images (uploads, thumbnails)."
    )
    image_queue: int = Field(
        16,
        ge=0,
        description="Image jobs waiting for those threads, at most; past it 503 at once.",
    )
    # A 100-megapixel PNG original (PNG cannot be reduced while decoding) takes ~400 MB: its
    # thumbnail fits, one at a time, in the API pod's memory limit (infra/k8s/base/api.yaml).
    image_memory_mb: int = Field(
        512,
        ge=16,
        description="Decoded pixels the image threads may hold at once; an image needing "
        "more than all of it is refused (413), others wait their turn.",
    )
    image_timeout_s: float = Field(
        10.0, gt=0, description="Deadline of reading and decoding one image (503 past it)."
    )
    embed_timeout_s: float = Field(
        1.0, gt=0, description="Deadline of the text or image embedding of one request."
    )
    search_timeout_s: float = Field(2.0, gt=0, description="Deadline of one vector search.")
    # A page of 20 from the best 100: room for a few bursts of near-duplicates to collapse and
    # for diversity to choose among.
    rerank_pool: int = Field(
        100,
        ge=1,
        le=10_000,
        description="Candidates read to collapse near-duplicates, diversify or sort by date "
        "(more when a collapsed page needs them; sort=newest orders exactly these).",
    )
    # Each photo of the pool is read like a page's result (~13 us) and named in the facet
    # calls' id filter: loadtests/bench_features.py measures what 1,000 cost a search.
    facet_pool: int = Field(
        300,
        ge=1,
        le=10_000,
        description="Photos that facet counts are counted over: the first this many of the "
        "search's ranking, or, with a score_threshold, this many of those above it (the "
        "answer says `capped` when there were as many). Each costs the pool's read: "
        "~13 ms at 300, ~39 ms at 1,000 (Qdrant Edge, 100,000 photos).",
    )
    # Re-ranking is CPU work in Python and numpy: more threads than the replica's cores only
    # queue it, and it must never hold the event loop that answers every other caller.
    rerank_threads: int = Field(
        2,
        ge=1,
        description="Threads of this replica that re-rank pools (diversity, collapse and the "
        "date order of large pools); searches past them wait, within RERANK_TIMEOUT_S.",
    )
    rerank_timeout_s: float = Field(
        2.0,
        gt=0,
        description="Deadline of one search's re-ranking, waiting for a thread included; past "
        "it 503 with Retry-After (the replica is busy re-ranking others).",
    )
    # Maximal marginal relevance picks one result at a time against every candidate: its cost
    # grows with the square of offset + limit (7.5 s at 10,100 on a 2-core host).
    diversity_window: int = Field(
        1000,
        ge=1,
        le=10_100,
        description="With diversity > 0, offset + limit may reach this at most (422 past "
        "it): the results diversity re-ranks one by one.",
    )
    # Business boosts (docs/searching/boosts.md): 0 leaves relevance as it is. A weight is in
    # the units of the search's score: a cosine is up to 1, a fused (hybrid) score ~0.03.
    boost_recency: float = Field(
        0.0,
        ge=0,
        le=10,
        description="Weight of recency added to each search's score (a search's "
        "boost_recency replaces it): weight x 0.5^(age / recency_half_life_days); 0: off.",
    )
    boost_popularity: float = Field(
        0.0,
        ge=0,
        le=10,
        description="Weight of popularity added to each search's score (a search's "
        "boost_popularity replaces it): weight x p / (p + popularity_half); 0: off.",
    )
    recency_half_life_days: float = Field(
        365.0, gt=0, description="Age at which a photo's recency boost is half its weight."
    )
    popularity_half: float = Field(
        10.0,
        gt=0,
        description="Popularity (opens + 5 x downloads) at which a photo's popularity boost "
        "is half its weight.",
    )
    # Little's law: at the ~150 text queries/s one CPU Triton serves, 16 in flight is ~100 ms
    # of work; a GPU Triton serves more, and a replica's share of it is what this bounds.
    max_embeds_in_flight: int = Field(
        16,
        ge=1,
        description="Uncached text and image searches this replica has Triton embed at once; "
        "past it 503 at once (cached searches and more-like-this never count).",
    )
    admission_wait_ms: float = Field(
        50.0,
        ge=0,
        description="How long a search that needs Triton waits for one of those before "
        "the 503 (absorbs a burst of a fraction of a second).",
    )
    overload_retry_after_s: int = Field(
        1, ge=1, description="Retry-After of a 503 refused by admission control (overload)."
    )
    # Little's law again: at 100 searches/s within 100 ms about 10 are in flight; 32 leaves
    # room for bursts and cached searches, and bounds what a replica far past its capacity
    # queues on its event loop (query_api/http/shedding.py).
    max_searches_in_flight: int = Field(
        32,
        ge=0,
        description="Searches this replica answers at once; past it 503 with Retry-After "
        "before any other work (0: no bound). Health, metrics, photos and admin never count.",
    )
    alias_cache_s: float = Field(
        1.0,
        ge=0,
        description="How long a replica reuses the live collection's name before asking the "
        "store again (a switch reaches every replica within it); 0: on every search.",
    )
    redis_timeout_s: float = Field(
        0.25, gt=0, description="Deadline of one cache call; past it the cache is bypassed."
    )
    redis_retry_s: float = Field(
        2.0, ge=0, description="After a cache failure, bypass Redis this long before trying."
    )
    retry_after_s: int = Field(5, ge=1, description="Retry-After of a 503 answer.")
    store_threads: int = Field(8, ge=1, description="Threads for blocking vector-store calls.")
    thumbnail_size: int = Field(320, ge=32, le=1024, description="Longest side of a thumbnail.")
    thumbnail_ttl_s: int = Field(86400, ge=1, description="How long thumbnails stay in Redis.")
    admin_wait_s: float = Field(
        10.0, gt=0, description="How long an admin rollback waits for the worker's answer."
    )
    log_file: Path | None = Field(
        None,
        description="Write the API's log (requests, errors) to this file, moved aside past "
        "LOG_MAX_BYTES, instead of to stderr; `photosearch up` sets DATA_DIR/logs/api.log.",
    )
    log_max_bytes: int = Field(
        50 * 1024 * 1024, ge=1024, description="LOG_FILE past this size becomes LOG_FILE.1."
    )
    log_backups: int = Field(
        2, ge=1, description="Moved-aside logs kept (LOG_FILE.1 ...): the disk used is bounded."
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="A connection's request headers must arrive within this."
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="A request's body must arrive within this (408 past it)."
    )
    max_connections: int = Field(
        1000, ge=1, description="Connections and requests served at once; past it 503."
    )
    feedback_retention_days: int = Field(
        30,
        ge=1,
        le=365,
        description="Days the search log and the events on its results are kept (in "
        "PHOTOSEARCH_REDIS__URL's Redis, which persists them); older ones are trimmed.",
    )
    events_per_minute: int = Field(
        600,
        ge=1,
        description="Events one caller (an API key, or an address without one) may post a "
        "minute, all at once at most; past it POST /v1/events is a 429. Never charged to the "
        "caller's search rate limit.",
    )
    events_batch_max: int = Field(
        50, ge=1, le=1000, description="Events one POST /v1/events may carry."
    )
    # A rare query of one person (a name, an address) is never shown to another: only what
    # several sessions searched is suggested (docs/searching/suggest.md).
    suggest_min_sessions: int = Field(
        3,
        ge=2,
        description="Different sessions (X-Session-Id) that must have searched a query, within "
        "half the feedback retention, before GET /v1/suggest offers it to anyone.",
    )
    suggest_queries: int = Field(
        50_000,
        ge=0,
        le=1_000_000,
        description="Popular queries each replica holds for suggestions; the log keeps twice "
        "as many candidates per period (trimmed to them past four times).",
    )
    suggest_terms: int = Field(
        100_000,
        ge=0,
        le=1_000_000,
        description="Words of titles and tags (and whole tags) each replica holds for "
        "suggestions: the most frequent, read from the live collection's payload index.",
    )
    suggest_refresh_s: float = Field(
        30.0,
        gt=0,
        description="How often a replica rereads the popular queries for suggestions (in the "
        "background, never on a request).",
    )
    suggest_vocabulary_refresh_s: float = Field(
        600.0,
        gt=0,
        description="How often a replica rereads the words of titles and tags from the store "
        "(and at once when the live collection changes).",
    )
    experiment_share: float = Field(
        0.05,
        gt=0,
        le=1,
        description="The share of text searches an interleaved experiment answers with both "
        "the live and the candidate rankings, when its start names none (each costs a second "
        "query embedding).",
    )
    experiment_alpha: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="The significance level of an experiment's sign test (wins against "
        "losses): `photosearch experiment status` and the automatic switch read it.",
    )
    experiment_auto_switch: bool = Field(
        False,
        description="An experiment whose candidate wins significantly (at experiment_alpha, "
        "over experiment_min_impressions at least) decides to switch by itself; the reindex's "
        "quality gate still applies at the switch.",
    )
    experiment_min_impressions: int = Field(
        200,
        ge=1,
        description="Impressions (interleaved searches with a click) an experiment needs "
        "before it may switch by itself.",
    )
