"""deploy tests."""
