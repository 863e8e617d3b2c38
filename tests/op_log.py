"""Record the aten ops a piece of code issues (a TorchDispatchMode), to prove things about the GPU
path on CPU or meta tensors: which ops would synchronise the host with the device, which copies
cross devices, and how many ops a call launches."""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that make the host wait for the device: a value read back (.item(), bool(), int(), equal),
# or an output whose size depends on tensor values (nonzero, boolean-mask indexing, unique).
HOST_SYNCS = {
    "_local_scalar_dense",
    "is_nonzero",
    "equal",
    "nonzero",
    "masked_select",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "bincount",
}
# repeat_interleave with a tensor of repeats and no output_size reads the repeats on the host.
_SYNCING_OVERLOADS = {"repeat_interleave.Tensor", "repeat_interleave.self_Tensor"}
# Indexing with a boolean (or uint8) mask runs nonzero inside the kernel, below this mode.
_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []  # "aten.add.Tensor", in issue order
        self.copies: list[tuple[str, str]] = []  # (source, destination) where they differ
        self.mask_indexing: list[str] = []  # index ops given a boolean mask

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = f"{func.overloadpacket.__name__}.{func._overloadname}"
        self.ops.append(name)
        if func.overloadpacket.__name__ in _INDEXING and _mask_indices(args):
            self.mask_indexing.append(name)
        src = dst = None
        if func.overloadpacket.__name__ in ("_to_copy", "to") and isinstance(out, torch.Tensor):
            src, dst = args[0].device.type, out.device.type
        elif func.overloadpacket.__name__ == "copy_":
            src, dst = args[1].device.type, args[0].device.type
        if src is not None and src != dst:
            self.copies.append((src, dst))
        return out

    def host_syncs(self) -> list[str]:
        base = {op.split(".")[0] for op in self.ops}
        found = [op for op in self.ops if op.split(".")[0] in HOST_SYNCS]
        found += [op for op in self.ops if op in _SYNCING_OVERLOADS]
        found += [f"copy {s}->{d}" for s, d in self.copies if d == "cpu"]
        found += [f"{op} with a boolean mask" for op in self.mask_indexing]
        assert base  # the mode saw something
        return found

    def counts(self) -> Counter:
        return Counter(self.ops)


def _mask_indices(args) -> bool:
    """index/index_put take (self, indices, ...): indices is a list of optional tensors."""
    indices = args[1] if len(args) > 1 else ()
    return any(
        isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)
        for t in (indices if isinstance(indices, list | tuple) else ())
    )
