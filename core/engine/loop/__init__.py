"""Running decode passes: the Engine (prefill, the step, the finished flags), the CUDA graphs of
the step, refills, and the host loop of continuous batching (run_continuous). An engine is built
for a memory plan's group, and the loop run, by qtts.core.synthesis.engine_driver alone. Imports
step and device."""
