"""The one error of an export, apart so that its steps (model/export.py, which calls the
tokenizer's export, and model/tokenizer_export.py) raise it without importing one another."""

from __future__ import annotations


class ExportError(RuntimeError):
    """The export cannot proceed; the message says what to change."""
