"""CUDA graphs for the engine's decode step: one graph per (slot count, KV view length).

A decode step launches well over a thousand small kernels (talker layers, 15 predictor passes,
sampling); replaying them as one graph removes the launch overhead that otherwise dominates at small
batch. Every input the step reads lives in the engine's persistent SlotState, so a graph needs no
input copies: the host loop just picks the graph for the current view length and replays it.
Graphs share one memory pool (they never run concurrently and keep no outputs of their own).
The eager twin is Engine.decode_step itself; tests/gpu ties the two together.
"""

from __future__ import annotations

import torch

from qtts.core.engine import Engine

# Small per-slot tensors a decode step changes. Warm-up runs real steps, so these are saved and
# restored around it; the KV and code buffers need no restore (the next real step rewrites the same
# positions, since lengths and counters are restored).
_MUTATED = ("c0", "past_hidden", "num_tokens", "finished", "hit_budget", "num_frames", "seen")


class GraphedDecodeStep:
    """Callable like Engine.decode_step(view_len), replaying a captured graph per view length."""

    def __init__(self, engine: Engine, warmup_steps: int = 2):
        if engine.tts_pad.device.type != "cuda":
            raise ValueError("CUDA graphs need the engine on a CUDA device")
        self.engine = engine
        self.warmup_steps = warmup_steps
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.pool = torch.cuda.graph_pool_handle()

    def __call__(self, view_len: int) -> None:
        graph = self.graphs.get(view_len)
        if graph is None:
            graph = self.graphs[view_len] = self._capture(view_len)
        graph.replay()

    @torch.no_grad()
    def _capture(self, view_len: int) -> torch.cuda.CUDAGraph:
        state = self.engine.state
        saved = {name: getattr(state, name).clone() for name in _MUTATED}
        saved_lengths = state.kv.lengths.clone()
        # Warm up on a side stream (lazy inits, Triton compilation, cuBLAS workspaces), then put
        # the state back exactly as it was: capturing itself executes nothing.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup_steps):
                self.engine.decode_step(view_len)
            for name, value in saved.items():
                getattr(state, name).copy_(value)
            state.kv.lengths.copy_(saved_lengths)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.engine.decode_step(view_len)
        return graph
