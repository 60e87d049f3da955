"""The embedding client the indexer and the query API share: tokenizer, images, Triton calls."""
