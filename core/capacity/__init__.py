"""Capacity: will a job fit a card, with how many slots, and how long will it take at best.

`qtts plan` answers from a checkpoint's config (or the published sizes) and an input file, with
no GPU and no weights in memory. Not a benchmark: nothing here is timed."""
