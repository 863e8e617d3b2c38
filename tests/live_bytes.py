"""Peak bytes of the tensors a piece of code allocates (a TorchDispatchMode): the measured twin of
the planner's byte counts (qtts.core.engine.plan.footprint). Works on CPU and meta tensors alike, so
real 0.6B/1.7B shapes are measured without memory. Counts storages, not tensors: a view adds
nothing, and a storage is freed when its last view dies. Tensors that existed before (weights,
slot state) are not counted; allocator rounding and fragmentation are not either."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._tracked: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}  # fmt: skip
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = id(storage)
            if key in inputs or key in self._tracked:
                continue  # a view or an in-place result: no new memory
            self._tracked.add(key)
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, key, storage.nbytes())
        return out

    def _free(self, key: int, nbytes: int) -> None:
        self._tracked.discard(key)
        self.live -= nbytes
