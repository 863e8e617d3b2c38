"""The out dir's durable job state: its paths (paths.py), atomic writes, the job file, shards,
journals, per-shard state, records, the locks, the reference-audio digest cache. The lowest
folder beside qtts.core.jobs.contract, and needs nothing of it."""
