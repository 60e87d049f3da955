"""Automatic tags: a vocabulary embedded by the text encoder, and the rule that picks tags."""
