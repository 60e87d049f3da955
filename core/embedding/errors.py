"""Typed failures of the embedding client, so callers map each to a status or a retry."""

from __future__ import annotations


class EmbeddingError(Exception):
    """Base of every embedding failure."""


class TritonUnavailable(EmbeddingError):
    """Triton cannot be reached or is not serving (after the client's retries): try later."""


class TritonQueueFull(TritonUnavailable):
    """Triton refused the request at once: its queue for this priority is at its bound.

    It is overloaded; retrying at once would only add to the queue, so the client does not.
    """


class TritonTimeout(EmbeddingError):
    """The call's deadline passed before Triton answered."""


class TritonQueueTimeout(TritonTimeout):
    """Triton dropped the request, still queued when its deadline passed: it is overloaded.

    Nothing was computed for it; retrying within the same deadline cannot succeed.
    """


class ModelVersionUnavailable(EmbeddingError):
    """The requested model version is not exported, or not loaded in Triton."""


class InferenceFailed(EmbeddingError):
    """Triton answered with an error for this request (not a transient one)."""


class InvalidImage(EmbeddingError, ValueError):
    """The bytes are not an image that can be embedded; the message says why."""


class ImageTooLarge(InvalidImage):
    """The image exceeds the configured byte or pixel limit."""
