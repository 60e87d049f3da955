"""The shared core: settings, the embedding client, the vector store, sources, caches, jobs."""
