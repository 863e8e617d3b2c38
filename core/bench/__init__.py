"""`qtts bench`: the engine and vocoder on random weights of the real model dimensions."""
