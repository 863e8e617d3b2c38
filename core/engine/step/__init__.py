"""One decode step's parts, as pure functions of device tensors: the slot state and static KV
caches, the KV views, decode and prefill attention, the fused and packed layer stacks, token
choice (the sampler's torch twin), the seeded noise, pinned host copies and the part timer.
Imports the device folder only."""
