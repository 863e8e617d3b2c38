"""The allocator behind a qtts process's Arrow tables: one that hands freed memory back.

A resume scan at ten million rows builds and drops several large temporaries (hash tables,
taken columns). pyarrow's default pool here (mimalloc) keeps much of what they freed, so the
process's peak grows past what it holds at any moment; jemalloc returns it. Measured on a
finished 10M-row rerun (docs/scale.md): 6.13 GB peak with mimalloc, 5.56 GB with jemalloc, the
same wall time. ARROW_DEFAULT_MEMORY_POOL, when set, is the user's choice and stands; a pyarrow
built without jemalloc keeps its default.
Knows pyarrow's pools; nothing of jobs.
"""

from __future__ import annotations

import os

import pyarrow as pa

PREFERRED = "jemalloc"


def use_returning_pool() -> str:
    """Make jemalloc Arrow's default pool (unless the environment chose one); its name."""
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except (NotImplementedError, pa.ArrowException):
            pass
    return pa.default_memory_pool().backend_name
