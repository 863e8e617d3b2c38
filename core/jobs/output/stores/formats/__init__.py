"""The output layouts: one module each, declaring it as `FORMAT` (a layout.Layout): `files.py`, and
each archive format (an archive.ArchiveFormat: `webdataset.py`, `parquet.py`, `shar.py`). The
registry (stores/registry.py) finds them here; nothing else names one. A module whose name starts
with `_` is not a layout. A layout module imports only the standard library at import time
(`qtts --help` reads every FORMAT), and pyarrow or numpy inside its functions."""
