"""Where a row's audio lands: one seam (OutputStore) with a store per layout: files, and the
archive formats the registry finds in formats/ (WebDataset tar shards, Parquet shards with a
Hugging Face Audio column, ...)."""
