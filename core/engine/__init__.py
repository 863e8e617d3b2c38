"""The fast path: slot state on the device, static KV caches, the decode step as a pure function of
device tensors (capturable as one CUDA graph), the sampler's torch twin and dispatch to the Triton
kernel, refills, and the host loop of continuous batching. Knows token ids and tensors; no text,
no files, no requests."""
