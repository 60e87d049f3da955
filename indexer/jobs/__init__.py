"""The jobs over whole collections: sync, reindex and its phases, catch-up, verification,
the quality gate, the switch and the rollback."""
