"""The indexer's settings refuse, at start, an SQS feed read for longer than its messages stay
hidden; the settings that make no such read are left as they are."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.settings import settings_from
from core.settings_indexer import IndexerSettings

SQS = "sqs+https://sqs.eu-west-1.amazonaws.com/123456789012/photos"


def test_an_sqs_feed_read_as_long_as_the_visibility_timeout_is_refused_naming_both() -> None:
    environ = {
        "PHOTOSEARCH_INDEXER__FEED": SQS,
        "PHOTOSEARCH_INDEXER__FEED_READ_S": "30",
        "PHOTOSEARCH_INDEXER__VISIBILITY_TIMEOUT_S": "30",
    }
    with pytest.raises(ValidationError) as refused:
        settings_from(environ)
    said = str(refused.value)
    assert "PHOTOSEARCH_INDEXER__FEED_READ_S (30 s) must be below" in said
    assert "PHOTOSEARCH_INDEXER__VISIBILITY_TIMEOUT_S (30 s)" in said


def test_an_sqs_feed_read_shorter_than_the_visibility_timeout_is_taken() -> None:
    settings = IndexerSettings(feed=SQS, feed_read_s=29.5, visibility_timeout_s=30)
    assert settings.feed_read_s < settings.visibility_timeout_s


@pytest.mark.parametrize("feed", [None, "file:///srv/photos/changes.log"])
def test_without_an_sqs_feed_no_read_is_timed_and_nothing_is_checked(feed: str | None) -> None:
    # Tests and `up` shorten the visibility timeout to seconds; a journal is read whole.
    settings = IndexerSettings(feed=feed, feed_read_s=60, visibility_timeout_s=3)
    assert settings.visibility_timeout_s == 3


def test_the_defaults_pass_the_check() -> None:
    defaults = IndexerSettings(feed=SQS)
    assert defaults.feed_read_s < defaults.visibility_timeout_s
