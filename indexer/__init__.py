"""The indexer: a Celery application that embeds photos into the vector store (issue 3)."""
