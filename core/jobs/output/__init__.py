"""What lands in the out dir: atomic audio files, each row's record and measures, results.parquet
and metadata.jsonl."""
