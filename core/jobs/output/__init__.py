"""What lands in the out dir: each row's audio (a file, or a member of an archive shard) and its
record and measures, results.parquet and metadata.jsonl; the out dir's listing and which recorded
rows are present. Writes through qtts.core.jobs.state's atomic files and journal."""
