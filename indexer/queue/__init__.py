"""A job's state in Redis: the work queue of shards and batches, the job's records, and the
changes captured for the collections that follow the live one."""
