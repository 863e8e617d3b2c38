"""The out dir's durable job state: its layout, the job file, journals, per-shard state, records,
the locks."""
