"""The memory plan's rules and byte counts: how many slots each length group gets and the
vocoder's rows per call (planner), what each part holds on the device (footprint), and a step's
roofline. The top of the engine: may import every folder below it."""
