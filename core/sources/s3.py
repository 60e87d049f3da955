"""S3-compatible object storage as a photo source: a bucket prefix through boto3, its errors
told apart as final or worth retrying."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from core.originals import (
    DEFAULT_LIMITS,
    PhotoTooLarge,
    ReadLimits,
    SourceError,
    SourceUnavailable,
    read_bounded,
    too_large,
)
from core.settings import S3Settings
from core.sources.base import SourceObject, is_hidden


def s3_client(settings: S3Settings, service: str = "s3", endpoint_url: str | None = None) -> Any:
    """A boto3 client for S3 (or SQS) with the settings' endpoint and keys, else the AWS chain."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    options: dict[str, Any] = {
        "config": Config(
            retries={"max_attempts": 5, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            signature_version=UNSIGNED if settings.anonymous else None,
        )
    }
    if endpoint_url or settings.endpoint_url:
        options["endpoint_url"] = endpoint_url or settings.endpoint_url
    if settings.region:
        options["region_name"] = settings.region
    if settings.access_key_id:
        options["aws_access_key_id"] = settings.access_key_id
        options["aws_secret_access_key"] = settings.secret_access_key
    # A session per client: boto3's default session is not safe across threads; clients are.
    return boto3.session.Session().client(service, **options)


def s3_errors(what: str, exc: Exception) -> SourceError:
    """A boto error as ours: a refusal (4xx) is final, anything else worth retrying."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if 400 <= status < 500 and status not in (408, 429):
            return SourceError(f"{what}: {exc}")
    return SourceUnavailable(f"{what}: {exc}")


class S3Source:
    """A bucket prefix through boto3; a file's version is its ETag."""

    def __init__(
        self, bucket: str, prefix: str, settings: S3Settings, limits: ReadLimits = DEFAULT_LIMITS
    ) -> None:
        self.bucket = bucket
        self.limits = limits
        self.prefix = prefix.strip("/")
        self.root = f"{bucket}/{self.prefix}".rstrip("/")
        self.uri = f"s3://{self.root}"
        self.key_prefix = f"{self.prefix}/" if self.prefix else ""
        self.client = s3_client(settings)

    def list_range(self, lo: str = "", hi: str | None = None) -> Iterator[SourceObject]:
        from botocore.exceptions import BotoCoreError, ClientError

        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.key_prefix}
        if lo:
            # Listing starts *after* StartAfter: after lo less its last character, every key
            # from lo on comes (with the few between, filtered here).
            request["StartAfter"] = self.key_prefix + lo[:-1]
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**request):
                for item in page.get("Contents", []):
                    key = item["Key"][len(self.key_prefix) :]
                    if hi is not None and key >= hi:
                        return
                    if key < lo or not key or key.endswith("/") or is_hidden(key):
                        continue
                    yield SourceObject(key, item["ETag"].strip('"'), int(item["Size"]))
        except (BotoCoreError, ClientError) as exc:
            raise s3_errors(f"cannot list {self.uri}", exc) from exc

    def stat(self, key: str) -> SourceObject | None:
        from botocore.exceptions import BotoCoreError, ClientError

        if not key or key.endswith("/") or is_hidden(key):
            return None
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key_prefix + key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise s3_errors(f"cannot stat {self.uri_of(key)}", exc) from exc
        except BotoCoreError as exc:
            raise s3_errors(f"cannot stat {self.uri_of(key)}", exc) from exc
        return SourceObject(key, str(head["ETag"]).strip('"'), int(head["ContentLength"]))

    def read(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        deadline = time.monotonic() + self.limits.timeout_s
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self.key_prefix + key)
            body = reply["Body"]
            try:
                size = int(reply.get("ContentLength") or 0)
                if size > self.limits.max_bytes:
                    raise PhotoTooLarge(too_large(size, self.limits))
                data = read_bounded(body.read, self.limits, deadline)
            finally:
                body.close()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(self.uri_of(key)) from exc
            raise s3_errors(f"cannot read {self.uri_of(key)}", exc) from exc
        except BotoCoreError as exc:
            raise s3_errors(f"cannot read {self.uri_of(key)}", exc) from exc
        return data

    def uri_of(self, key: str) -> str:
        return f"{self.uri}/{key}"

    def key_of(self, uri: str) -> str | None:
        return uri[len(self.uri) + 1 :] if uri.startswith(self.uri + "/") else None

    def close(self) -> None:
        self.client.close()
