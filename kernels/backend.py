"""Whether triton is importable, and whether it runs kernels in its numpy interpreter.

Every kernel module imports triton from here, so a CPU-only install without triton still imports
qtts.kernels (each op then runs its torch twin). TRITON_INTERPRET=1 must be set before triton is
first imported: it is read at decoration time, process-wide.
"""

from __future__ import annotations

try:
    import triton
    import triton.language as tl

    TRITON_AVAILABLE = True
except ImportError:  # CPU-only installs: the torch twins serve every call
    triton = tl = None
    TRITON_AVAILABLE = False


def is_interpreted(kernel) -> bool:
    """True when `kernel` (a @triton.jit function) runs in triton's interpreter."""
    return type(kernel).__name__ == "InterpretedFunction"
