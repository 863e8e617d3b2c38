"""The Ray Data backend of `qtts batch` (--backend ray): one job across many GPUs or machines.

The driver reads and validates the manifest and drops the rows already done, exactly as a local
run does (this is a JobRun; only its synthesis loop differs), then hands the rest to Ray Data:
from_arrow -> repartition -> map_batches(SynthesisActor, compute=ActorPoolStrategy(size=N),
num_gpus=G). Each actor loads the model once and runs the local engine (longest first,
continuous batching) on the rows it is given; it writes every audio file atomically into the
shared out dir, fails rows on their own, and returns small metadata rows, never audio. The driver
is the only writer of the journal and results and journals rows as they stream back, so killing
it loses at most the rows in flight (a rerun redoes only those). Ray restarts a dead actor and
retries its rows (Ray Data's actor defaults); a cluster that cannot host the actors fails within
MIN_ACTORS_WAIT_S instead of waiting forever.

Imports ray when a job uses it, and no torch in the driver (actors load the model themselves).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qtts.core.jobs.budget import longest_first
from qtts.core.jobs.journal import AudioInfo, ok_record
from qtts.core.jobs.locked_run import JobRun, utterance_error
from qtts.core.jobs.spec import UsageError
from qtts.core.jobs.writer import OutputWriter, WriteJob
from qtts.core.synthesis.requests import Request, RowFailure

log = logging.getLogger("qtts")

ROWS_PER_CALL = 64  # rows an actor takes at once: enough to keep its engine's slots refilled
SPARE_CPU_SLOTS = 4  # logical CPUs a local cluster adds for Ray Data's own tasks
MIN_ACTORS_WAIT_S = 120  # how long Ray Data may wait for its actors to start before failing
REQUEST_FIELDS = ("id", "text", "row", "speaker", "language", "instruct", "seed", "ref_audio",
                  "ref_text", "max_new_tokens")  # fmt: skip


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: RAY_ADDRESS, else a local Ray started for the job
    workers: int | None = None  # None: one per GPU in the cluster, or 1 without GPUs
    gpus_per_worker: float | None = None  # None: 1 when the cluster has GPUs, else 0


def import_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UsageError(
            "--backend ray needs Ray Data: pip install 'qtts[ray]' (ray[data] 2.60)"
        ) from None
    return ray


class RayJobRun(JobRun):
    """A JobRun whose rows are synthesized by Ray Data actors (see the module docstring)."""

    def __init__(self, *args, ray_options: RayOptions, open_text_model, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ray_options, self.open_text_model = ray_options, open_text_model

    def _run(self, todo: list[Request]) -> None:
        if not self._begin(todo):
            return
        ray = import_ray()
        started = _connect(ray, self.ray_options.address)
        try:
            self._stream(ray, longest_first(todo, self.validated.estimated_frames))
        finally:
            if started:  # our own local cluster: stop its actors with the job
                ray.shutdown()

    def _stream(self, ray, order: list[Request]) -> None:
        import pyarrow as pa

        workers, gpus = _actors(ray, self.ray_options)
        context = ray.data.DataContext.get_current()
        context.wait_for_min_actors_s = MIN_ACTORS_WAIT_S
        log.info("ray: %d worker(s), %g GPU(s) each, %d rows", workers, gpus, len(order))
        table = pa.Table.from_pylist([{f: getattr(r, f) for f in REQUEST_FIELDS} for r in order])
        blocks = max(1, math.ceil(len(order) / ROWS_PER_CALL))
        results = (
            ray.data.from_arrow(table)
            .repartition(blocks)
            .map_batches(
                SynthesisActor,
                fn_constructor_kwargs=self._actor_kwargs(),
                compute=ray.data.ActorPoolStrategy(size=workers),
                num_gpus=gpus,
                batch_size=ROWS_PER_CALL,
                batch_format="pyarrow",
            )
        )
        waiting = {r.id: r for r in order}
        batches = iter(results.iter_batches(batch_size=None, batch_format="pyarrow"))
        while True:
            with self.stop.interruptible():
                batch = next(batches, None)
            if batch is None:
                break
            for meta in batch.to_pylist():
                self._journal(waiting.pop(meta["id"]), meta)
            if self._too_many_failures():
                self.aborted = True
                return  # the rest stays pending
        for r in waiting.values():
            self.journal.append([self._failed(r, "no result came back from the ray workers")])
            self.failures += 1

    def _journal(self, req: Request, meta: dict[str, Any]) -> None:
        if meta["status"] != "ok":
            self.journal.append([self._failed(req, meta["error"])])
            self.failures += 1
            self.progress.advance(1, 0.0)
            return
        info = AudioInfo(meta["num_frames"], meta["num_samples"], meta["sample_rate"],
                         meta["hit_frame_budget"])  # fmt: skip
        rec = ok_record(req, info, meta["file"], run=self.run_id, model=self.text_model.name)
        self.journal.append([rec])
        self.audio_s += rec["duration_s"]
        self.progress.advance(1, rec["duration_s"])

    def _actor_kwargs(self) -> dict[str, Any]:
        s = self.spec
        return {
            "model": s.model, "device": s.device, "dtype": s.dtype, "batch_size": s.batch_size,
            "out_dir": str(Path(s.out_dir).resolve()), "audio_format": s.audio_format,
            "save_codes": s.save_codes, "on_budget": s.on_budget, "options": self.options,
            "open_text_model": self.open_text_model, "load_synthesizer": self.load_synthesizer,
        }  # fmt: skip


class SynthesisActor:
    """One Ray actor: the model loaded once; each call synthesizes its rows with the local
    engine, writes their files atomically and returns one metadata row per input row."""

    def __init__(self, *, model, device, dtype, batch_size, out_dir, audio_format, save_codes,
                 on_budget, options, open_text_model, load_synthesizer) -> None:  # fmt: skip
        self.text_model = open_text_model(model)
        self.synth = load_synthesizer(self.text_model, device, dtype, batch_size)
        self.writer = OutputWriter(Path(out_dir), audio_format, workers=1)
        self.save_codes, self.on_budget, self.options = save_codes, on_budget, options

    def __call__(self, batch):
        import pyarrow as pa

        requests = [Request(**row) for row in batch.select(list(REQUEST_FIELDS)).to_pylist()]
        by_id = {r.id: r for r in requests}
        out = []
        for item in self.synth.synthesize(requests, self.options):
            out.append(self._finish(item, by_id.pop(item.id)))
        out += [_failed(r.id, "the synthesizer returned no result for this row")
                for r in by_id.values()]  # fmt: skip
        return pa.Table.from_pylist(out, schema=_meta_schema())

    def _finish(self, item, req: Request) -> dict[str, Any]:
        if isinstance(item, RowFailure):
            return _failed(item.id, item.error)
        error = utterance_error(item, req, self.on_budget)
        if error is not None:
            return _failed(item.id, error)
        codes = item.codes if self.save_codes else None
        file = self.writer.write(WriteJob(item.id, item.audio, item.sample_rate, codes))
        info = AudioInfo.of(item)
        return {"id": item.id, "status": "ok", "error": None, "file": file,
                **info.__dict__}  # fmt: skip


def _failed(row_id: str, error: str) -> dict[str, Any]:
    return {"id": row_id, "status": "failed", "error": error, "file": None, "num_frames": None,
            "num_samples": None, "sample_rate": None, "hit_frame_budget": None}  # fmt: skip


def _meta_schema():
    """The metadata rows an actor returns (pyarrow is imported on use)."""
    import pyarrow as pa

    return pa.schema([("id", pa.string()), ("status", pa.string()), ("error", pa.string()),
                      ("file", pa.string()), ("num_frames", pa.int64()),
                      ("num_samples", pa.int64()), ("sample_rate", pa.int64()),
                      ("hit_frame_budget", pa.bool_())])  # fmt: skip


def _connect(ray, address: str | None) -> bool:
    """Join the given cluster (or RAY_ADDRESS), or start a local one; True if started here."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        return False
    # Each actor holds a CPU slot; Ray Data's own tasks (repartition, reads) need slots too,
    # and on a small box the actors could take them all and stall the pipeline for good.
    ray.init(num_cpus=(os.cpu_count() or 1) + SPARE_CPU_SLOTS, include_dashboard=False,
             log_to_driver=False)  # fmt: skip
    return True


def _actors(ray, o: RayOptions) -> tuple[int, float]:
    """(workers, GPUs per worker), checked against the cluster so a job that cannot be hosted
    fails at once with the numbers, not after a long wait."""
    cluster_gpus = float(ray.cluster_resources().get("GPU", 0))
    gpus = o.gpus_per_worker if o.gpus_per_worker is not None else (1.0 if cluster_gpus else 0.0)
    if o.workers is not None:
        workers = o.workers
    else:
        workers = max(1, int(cluster_gpus // gpus)) if gpus else 1
    if workers * gpus > cluster_gpus:
        raise UsageError(
            f"the Ray cluster has {cluster_gpus:g} GPU(s); --workers {workers} x "
            f"--gpus-per-worker {gpus:g} needs {workers * gpus:g}"
        )
    return workers, gpus
