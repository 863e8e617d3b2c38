"""Triton kernels, each with a pure-torch twin; importable without triton."""
