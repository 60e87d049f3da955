"""Suggestions: completions of what a searcher typed, from a replica's in-memory index."""
