"""Helpers the tests share: servers and processes they start, photos, waits."""
