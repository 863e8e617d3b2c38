"""Where a row's audio lands: one seam (OutputStore) with a store per layout: files, tar shards
(WebDataset), Parquet shards (Hugging Face Audio)."""
