"""Running decode passes: the Engine (prefill, the step, the finished flags), its construction for
a memory plan's group, the CUDA graphs of the step, refills, and the host loop of continuous
batching (run_continuous). Imports step and device."""
