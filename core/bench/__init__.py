"""Tools that measure and plan: `qtts bench` (the engine and vocoder on random weights of the
real model dimensions) and `qtts plan` (a job's memory plan and roofline, no GPU needed)."""
