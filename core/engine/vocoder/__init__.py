"""The speech decoder's fast path: the window plan and bucketed decode, the window CUDA graphs,
the ops installed into a decoder on CUDA and its frame-rate convolutions as products. Imports
loop (graph capture), step and device."""
