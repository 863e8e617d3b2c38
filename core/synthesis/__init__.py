"""Requests -> audio on a loaded checkpoint: prompts (text layout of docs/model.md, "Prompt
layout"), voice-clone references, the engine (built and run by the one engine driver) or the
naive generator, the speech decoder overlapped with decoding, and per-row failures. Implements
the protocols of qtts.core.jobs.contract.interfaces; knows no manifests, out dirs or journals."""
