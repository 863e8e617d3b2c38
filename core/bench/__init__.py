"""`qtts bench`: the engine and vocoder timed on random weights of the real model dimensions, the
decode step split into parts that add up, and kernel launches counted on the meta device."""
