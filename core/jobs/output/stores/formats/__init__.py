"""The archive formats: one module each, declaring it as `FORMAT` (shard_format.ArchiveFormat).
The registry (stores/registry.py) finds them here; nothing else names one. A module whose name
starts with `_` is not a format. A format module imports only the standard library at import
time (`qtts --help` reads every FORMAT), and pyarrow or numpy inside its functions."""
