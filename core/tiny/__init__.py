"""Tiny random checkpoints and tokenizers in the published layout, for tests, examples and the
oracle scripts (no weights can be downloaded there). Never used by a job."""
