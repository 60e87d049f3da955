"""Change feeds: which files changed since the last increment, without listing the catalogue.

- `sqs+https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE` (`sqs+http://…` for an emulator): the
  queue that the bucket's event notifications (s3:ObjectCreated:*, s3:ObjectRemoved:*) go to,
  directly or through SNS. Messages are received in chunks, marked as seen in the same Redis
  script that commits their plan, and deleted afterwards: a message received again (a crash
  before the delete) is recognised and dropped, and none is lost (a crash before the commit
  leaves it in the queue). A standard queue keeps no order: a message sent after the
  increment began says nothing of those behind it, so it is held aside and the read goes on
  until its count or time budget is spent or the queue answers empty.
- `file:///path/changes.log`: a journal for a folder source, one changed key per line (or a
  JSON object with a "key"), appended by whatever writes the photos (the upload service,
  `inotifywait -m -r -e close_write,moved_to,delete --format %w%f`...). Its offset is
  committed with the plan; a journal rotated (another inode, or shorter) is read from its
  start.

An event is a hint, never the truth: the increment asks the source for each key's state now
(indexer/plan/increment.py), so events that arrive twice, late or out of order change nothing.
Whatever a feed misses (a lost event, changes while it was not configured), the weekly full
sync (PHOTOSEARCH_INDEXER__RECONCILE_CRON) finds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, unquote_plus, urlparse

from redis import Redis

from core.settings import S3Settings
from core.sources import S3Source, Source, SourceError, s3_client

# SQS keeps a message 4 days by default: a seen mark outlives any copy of it.
SEEN_TTL_S = 14 * 86400


@dataclass
class FeedChunk:
    """Changed keys, what to commit with their plan (key -> (value, ttl s; 0 for none)), what
    to do once it is committed, what to do when its plan is refused (given back to the feed
    at once, for a forced increment), and whether the feed has more."""

    keys: list[str]
    more: bool
    marks: dict[str, tuple[str, int]] = field(default_factory=dict)
    ack: Callable[[], None] = lambda: None
    give_back: Callable[[], None] = lambda: None


class Feed(Protocol):
    uri: str

    def read(self, limit: int, until: float) -> FeedChunk:
        """Up to `limit` changes (fewer when the feed runs dry or the read's time is up), none
        sent after `until`."""

    def close(self) -> None:
        """Release its connections (after the chunk's acknowledgement)."""


def s3_event_keys(body: str, bucket: str, prefix: str) -> Iterator[str]:
    """The keys (relative to prefix) of an S3 event notification, or of one sent through SNS."""
    try:
        message: Any = json.loads(body)
        if isinstance(message, dict) and isinstance(message.get("Message"), str):
            message = json.loads(message["Message"])  # S3 -> SNS -> SQS
    except json.JSONDecodeError:
        return
    if not isinstance(message, dict):
        return
    for record in message.get("Records") or []:
        try:
            s3 = record["s3"]
            if s3["bucket"]["name"] != bucket:
                continue
            # S3 writes the key URL-encoded, spaces as '+'.
            key = unquote_plus(s3["object"]["key"])
        except (KeyError, TypeError):
            continue
        if key.startswith(prefix) and len(key) > len(prefix):
            yield key[len(prefix) :]


class SqsFeed:
    """S3 event notifications in an SQS queue."""

    def __init__(
        self,
        url: str,
        source: S3Source,
        s3: S3Settings,
        redis: Redis,
        prefix: str,
        hold_s: int,
        read_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.uri = url
        self.queue_url = url.removeprefix("sqs+")
        parsed = urlparse(self.queue_url)
        # AWS signs for the queue's region, which its address names (sqs.REGION.amazonaws.com).
        host = parsed.hostname or ""
        if not s3.region and host.startswith("sqs.") and host.endswith(".amazonaws.com"):
            s3 = s3.model_copy(update={"region": host.split(".")[1]})
        self.client = s3_client(s3, "sqs", endpoint_url=f"{parsed.scheme}://{parsed.netloc}")
        self.source = source
        self.redis = redis
        self.prefix = prefix
        self.hold_s = hold_s  # messages stay invisible this long while they are planned
        self.read_s = read_s  # one read's time budget
        self.now = now

    def read(self, limit: int, until: float) -> FeedChunk:
        """Up to `limit` keys, for at most read_s, of the messages sent by `until`. One sent
        later is held invisible for the rest of the read, so receiving again skips it, and
        given back when the read ends: the next increment takes it."""
        keys: dict[str, None] = {}
        marks: dict[str, tuple[str, int]] = {}
        done: list[str] = []  # receipt handles to delete after the commit
        later: list[str] = []  # receipt handles of messages sent after `until`
        deadline = self.now() + self.read_s
        empty = False
        try:
            while len(keys) < limit and self.now() < deadline:
                reply = self.client.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=min(10, limit - len(keys)),
                    WaitTimeSeconds=1,
                    VisibilityTimeout=self.hold_s,
                    MessageSystemAttributeNames=["SentTimestamp"],
                )
                messages = reply.get("Messages", [])
                empty = not messages
                if empty:
                    break
                for message in messages:
                    handle = message["ReceiptHandle"]
                    sent = int(message.get("Attributes", {}).get("SentTimestamp", 0)) / 1000
                    if sent > until:
                        later.append(handle)
                        continue
                    seen = f"{self.prefix}:feed:seen:{message['MessageId']}"
                    if not self.redis.exists(seen):
                        for key in s3_event_keys(
                            message["Body"], self.source.bucket, self.source.key_prefix
                        ):
                            keys[key] = None
                        marks[seen] = ("1", SEEN_TTL_S)
                    done.append(handle)
        finally:
            self.visible_now(later)
        # A read that took nothing in its whole budget leaves the rest to the next increment:
        # messages sent after this one began cannot keep it reading.
        more = not empty and bool(done)

        def ack() -> None:
            for start in range(0, len(done), 10):
                entries = [
                    {"Id": str(n), "ReceiptHandle": h}
                    for n, h in enumerate(done[start : start + 10])
                ]
                self.client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)

        def give_back() -> None:
            # Visible again now, not after hold_s: the forced increment that follows a refusal
            # finds them (their seen marks were never committed).
            self.visible_now(done)

        return FeedChunk(list(keys), more, marks, ack, give_back)

    def visible_now(self, handles: list[str]) -> None:
        """Give messages back to the queue at once."""
        for start in range(0, len(handles), 10):
            entries = [
                {"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": 0}
                for n, h in enumerate(handles[start : start + 10])
            ]
            self.client.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)

    def close(self) -> None:
        self.client.close()


class JournalFeed:
    """A file of changed keys, one per line, read from the offset of the last commit."""

    def __init__(self, path: Path, redis: Redis, prefix: str) -> None:
        self.path = path
        self.uri = path.as_uri()
        self.redis = redis
        self.offset_key = f"{prefix}:feed:offset:{path}"

    def read(self, limit: int, until: float) -> FeedChunk:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return FeedChunk([], more=False)
        saved: bytes | None = self.redis.get(self.offset_key)  # type: ignore[assignment]
        inode, _, offset = (saved or b"").decode().partition(":")
        start = int(offset) if inode == str(stat.st_ino) and int(offset or 0) <= stat.st_size else 0
        keys: dict[str, None] = {}
        more = False
        with self.path.open("rb") as journal:
            journal.seek(start)
            end = start
            while True:
                line = journal.readline()
                if not line.endswith(b"\n"):
                    break  # the end, or a line still being written: read it next time
                end += len(line)
                if key := journal_key(line.decode("utf-8", errors="replace")):
                    keys[key] = None
                if len(keys) >= limit:
                    more = end < stat.st_size
                    break
        return FeedChunk(list(keys), more, {self.offset_key: (f"{stat.st_ino}:{end}", 0)})

    def close(self) -> None:
        pass


def journal_key(line: str) -> str | None:
    text = line.strip()
    if text.startswith("{"):
        try:
            text = str(json.loads(text).get("key") or "")
        except (json.JSONDecodeError, AttributeError):
            return None
    return text.lstrip("/") or None


def open_feed(
    uri: str,
    source: Source,
    s3: S3Settings,
    redis: Redis,
    prefix: str,
    hold_s: int,
    read_s: float,
    now: Callable[[], float] = time.monotonic,
) -> Feed:
    """The feed of a source: an SQS queue of its bucket's events (a read's time budget read_s
    by the clock `now`), or a journal file."""
    scheme = urlparse(uri).scheme
    if scheme in ("sqs+https", "sqs+http"):
        if not isinstance(source, S3Source):
            raise SourceError(f"feed {uri}: S3 events need an s3:// source, not {source.uri}")
        return SqsFeed(uri, source, s3, redis, prefix, hold_s, read_s, now)
    if scheme == "file":
        return JournalFeed(Path(unquote(urlparse(uri).path)), redis, prefix)
    raise SourceError(f"feed {uri!r}: use sqs+https://QUEUE-URL or file:///path/to/journal")
