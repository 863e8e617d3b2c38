"""How the engine runs on this device: the QTTS_* knobs read and checked (torch-free), a CPU's
thread budget and allocator, and EngineTuning, the one tuning object every path takes. The
bottom of the engine: imports nothing else of it."""
