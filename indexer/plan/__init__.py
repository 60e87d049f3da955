"""Planning: a shard of the catalogue listed (or a change feed read), joined with its
metadata, diffed against the store and turned into batches to embed."""
