"""PhotoSearch: CLIP photo search, shared core (settings, embedding client, CLI)."""
