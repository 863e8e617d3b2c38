"""qtts.core: the library behind the CLI, one subpackage per stage of the data flow.

    jobs       rows in -> validated requests -> lock, resume, journal, files, results (no torch)
    synthesis  requests -> prompts -> codes (engine or naive generator) -> audio
    engine     slots, static KV caches, decode step, CUDA graphs, sampling, continuous batching
    model      checkpoint config, plain PyTorch modules, strict loading

Imports point down this list only: jobs knows the synthesis protocols, not torch; synthesis drives
the engine; the engine runs the model. `bench` measures the engine on random real-size weights;
`tiny` makes tiny random checkpoints for tests and examples (never used by a job).
"""
