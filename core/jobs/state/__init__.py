"""The out dir's durable job state: its file names, atomic writes, the job file, shards, journals,
per-shard state, records, locks. The lowest folder beside contract, and needs nothing of it."""
