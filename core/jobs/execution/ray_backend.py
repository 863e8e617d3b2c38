"""--backend ray (docs/job-state.md, "Ray"): the driver does all a local run does but synthesize.
The rows go to Ray Data in work units (from_arrow -> repartition -> map_batches(SynthesisActor));
each actor loads the model once, publishes its rows through the run's output store, journals them
in a journal of its own and returns only small outcome rows.
Imports ray when a job uses it, and no torch in the driver (actors load the model themselves).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import FatalError, UsageError
from qtts.core.jobs.execution.interrupt import StopSignals
from qtts.core.jobs.execution.local_backend import run_chunk
from qtts.core.jobs.execution.ray_local import start_local_ray
from qtts.core.jobs.output.recorder import Outcome, RecordContext, RowRecorder
from qtts.core.jobs.state.journal import Journal, read_journals
from qtts.core.jobs.state.paths import RAY_PREFIX, StatePaths
from qtts.core.jobs.state.records import OK, ROW_FIELDS
from qtts.core.jobs.work.chunks import Todo, chunk_requests

if TYPE_CHECKING:
    from qtts.core.jobs.contract.interfaces import LoadSynthesizer, OpenTextModel
    from qtts.core.jobs.contract.spec import JobSpec, SplitOptions
    from qtts.core.jobs.execution.locked_run import RunSetup
    from qtts.core.jobs.work.budget import FrameBudget
    from qtts.core.synthesis.requests import GenerationOptions, Placement

log = logging.getLogger("qtts")

# An actor's engine keeps this many rows in flight when --batch-size is auto: the memory
# planner's cap (qtts.core.engine.plan.planner.MAX_AUTO_SLOTS; a test keeps the two equal).
PLANNED_SLOTS = {"cuda": 256, "cpu": 64}
UNIT_SLOTS = 8  # rows per work unit, in slots: the engine's tail at the end of a unit is short
SPARE_CPU_SLOTS = 4  # logical CPUs a local cluster adds for Ray Data's own tasks
MIN_ACTORS_WAIT_S = 120  # how long Ray Data may wait for its actors to start before failing
OUTCOME_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("duration_s", pa.float64()),
    ]
)


class RayConnectError(FatalError):
    """The Ray cluster could not be reached in time (exit 1)."""


def import_ray() -> ModuleType:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UsageError(
            "--backend ray needs Ray Data: pip install 'qtts[ray]' (ray[data] 2.60)"
        ) from None
    return ray


def rows_per_unit(rows: int, workers: int, slots: int) -> int:
    """Every worker gets a unit even in a small job; a unit is at most UNIT_SLOTS x slots."""
    return max(1, min(math.ceil(rows / workers), UNIT_SLOTS * slots))


@dataclass
class RayBackend:
    ray: Any
    started: bool  # this process started a local cluster (stopped with the job)
    workers: int
    gpus: float
    actor_kwargs: dict[str, Any]
    slots: int

    @classmethod
    def connect(
        cls,
        spec: JobSpec,
        setup: RunSetup,
        options: GenerationOptions,
        open_text_model: OpenTextModel,
        load_synthesizer: LoadSynthesizer,
    ) -> RayBackend:
        """Reach the cluster (or start a local one) and size the actors; writes nothing."""
        ray = import_ray()
        started = _connect(ray, spec.scale_out.ray.address, spec.scale_out.ray.timeout)
        try:
            workers, gpus = _actors(
                ray, spec.scale_out.ray.workers, spec.scale_out.ray.gpus_per_worker
            )
        except BaseException:
            if started:
                ray.shutdown()
            raise
        kwargs = {
            "model": spec.model.name,
            "placement": spec.model.placement,
            "out_dir": str(spec.output.out_dir.resolve()),
            "options": options,
            "budget": setup.budget,
            "split": spec.split,
            "open_text_model": open_text_model,
            "load_synthesizer": load_synthesizer,
        }
        slots = spec.model.batch_size or PLANNED_SLOTS["cuda" if gpus else "cpu"]
        return cls(
            ray=ray, started=started, workers=workers, gpus=gpus, actor_kwargs=kwargs, slots=slots
        )

    def prepare(self, stop: StopSignals) -> None:
        """Nothing: the actors load the model as they start."""

    def outcomes(
        self, todo: Todo, journal: Journal, ctx: RecordContext, stop: StopSignals
    ) -> Iterator[Outcome]:
        ray = self.ray
        todo = todo.ordered(list(ROW_FIELDS))  # units of similar lengths
        try:
            unit = rows_per_unit(todo.num_rows, self.workers, self.slots)
            if ctx.store.fmt.shards:  # a unit fills one archive shard at most
                unit = min(unit, ctx.store.shard_rows)
            log.info(
                "ray: %d worker(s), %g GPU(s) each, %d rows in units of %d",
                self.workers,
                self.gpus,
                todo.num_rows,
                unit,
            )
            ray.data.DataContext.get_current().wait_for_min_actors_s = MIN_ACTORS_WAIT_S
            if not log.isEnabledFor(logging.DEBUG):  # qtts logs the job's progress; -v: Ray's too
                logging.getLogger("ray.data").setLevel(logging.WARNING)
            results = (
                ray.data.from_arrow(todo)
                .repartition(math.ceil(todo.num_rows / unit))
                .map_batches(
                    SynthesisActor,
                    fn_constructor_kwargs={**self.actor_kwargs, "ctx": ctx, "started": time.time()},
                    compute=ray.data.ActorPoolStrategy(
                        size=self.workers, max_tasks_in_flight_per_actor=1
                    ),
                    num_gpus=self.gpus,
                    **_driver_knobs(),
                    batch_size=None,  # one call per unit
                    batch_format="pyarrow",
                )
            )
            seen: list[pa.Array] = []
            batches = iter(results.iter_batches(batch_size=None, batch_format="pyarrow"))
            while True:
                with stop.interruptible():
                    batch = next(batches, None)
                if batch is None:
                    break
                seen.append(batch.column("id"))
                for o in batch.to_pylist():
                    yield Outcome(o["id"], o["status"], o["duration_s"] or 0.0, o["error"])
            yield from self._missing(todo, seen, journal, ctx)
        finally:
            if self.started:  # our own local cluster: stop its actors with the job
                ray.shutdown()

    def _missing(
        self, todo: pa.Table, seen: list[pa.Array], journal: Journal, ctx: RecordContext
    ) -> Iterator[Outcome]:
        """Rows no unit returned (a bug or a lost unit): those an actor did publish and journal
        (a unit lost after its shard was sealed) are ok; the rest failed, by the driver, which
        would otherwise hide a published row behind a newer failed record."""
        returned = pa.chunked_array(seen, pa.string()).combine_chunks() if seen else None
        lost = (
            todo
            if returned is None
            else todo.filter(pc.invert(pc.is_in(todo["id"], value_set=returned)))
        )
        if lost.num_rows == 0:
            return
        out_dir = Path(self.actor_kwargs["out_dir"])
        made = _published_by_actors(out_dir, lost["id"], ctx.run)
        recorder = RowRecorder(None, journal, ctx)
        for row in lost.select(list(ROW_FIELDS)).to_pylist():
            if row["id"] in made:
                yield Outcome(row["id"], OK, made[row["id"]])
                continue
            ctx.store.fmt.remove_row(out_dir, row["id"])  # as a store would: an earlier run's
            yield recorder.failed(row, "no result came back from the ray workers")


class SynthesisActor:
    """One Ray actor: the model loaded once; each call synthesizes one unit of rows with the
    local engine, writes and journals them, and returns one outcome row per input row."""

    def __init__(
        self,
        *,
        model: str,
        placement: Placement,
        out_dir: str,
        options: GenerationOptions,
        budget: FrameBudget,
        split: SplitOptions | None,
        ctx: RecordContext,
        started: float,
        open_text_model: OpenTextModel,
        load_synthesizer: LoadSynthesizer,
    ) -> None:
        self.text_model = open_text_model(model)
        self.synth = load_synthesizer(self.text_model, placement)
        self.out_dir, self.options, self.budget, self.ctx = Path(out_dir), options, budget, ctx
        self.split = split
        self.started = started  # when the driver handed the rows out (wall clock)
        self.journal = Journal(StatePaths(self.out_dir).ray_journal(uuid.uuid4().hex[:12]))

    def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch["id"].to_pylist()
        store = self.ctx.store.open_unit(self.out_dir, self.journal, ids)
        try:
            # Rows of a retried unit that an earlier attempt of this run already published
            done = store.published(ids, self.started)
            done_ids = pa.array(list(done), pa.string())
            rest = batch.filter(pc.invert(pc.is_in(batch["id"], value_set=done_ids)))
            chunk = chunk_requests(rest, self.text_model, self.budget, self.split)
            recorder = RowRecorder(store, self.journal, self.ctx)
            pending = list(run_chunk(self.synth, chunk, self.options, recorder))
            outcomes = [r if isinstance(r, Outcome) else r.result() for r in pending]
        finally:
            store.close()  # an archive unit's shard is sealed: its rows durable, then returned
        outcomes = [Outcome(i, OK, d) for i, d in done.items()] + outcomes
        return pa.Table.from_pylist([asdict(o) for o in outcomes], schema=OUTCOME_SCHEMA)


def _published_by_actors(out_dir: Path, ids: pa.ChunkedArray, run: str) -> dict[str, float]:
    """{id: seconds} of `ids` that actors of this run journalled ok (a rare path: lost units)."""
    paths = StatePaths(out_dir)
    actors = [p for p in paths.journals() if p.name.startswith(RAY_PREFIX)]
    records, _ = read_journals(actors)
    ok = pc.and_(pc.equal(records["status"], OK), pc.equal(records["run"], run))
    ok = pc.and_(pc.fill_null(ok, False), pc.is_in(records["id"], value_set=ids.combine_chunks()))
    made = records.filter(ok)
    return dict(zip(made["id"].to_pylist(), made["duration_s"].to_pylist(), strict=True))


def _connect(ray: ModuleType, address: str | None, timeout: float) -> bool:
    """Join the cluster (or RAY_ADDRESS) within `timeout` s, or start one; True if started here."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        # Each actor holds a CPU slot; Ray Data's own tasks (repartition, reads) need slots too,
        # and on a small box the actors could take them all and stall the pipeline for good.
        start_local_ray(ray, num_cpus=(os.cpu_count() or 1) + SPARE_CPU_SLOTS)
        return True
    deadline = time.monotonic() + timeout
    _probe(address, timeout)
    error: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except BaseException as e:  # noqa: BLE001 -- reported below
            error.append(e)

    thread = threading.Thread(target=init, name="qtts-ray-connect", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.1))  # one --ray-timeout for both steps
    if thread.is_alive():
        raise RayConnectError(
            f"no Ray cluster answered at {address} within {timeout:g} s "
            "(--ray-timeout); nothing was written"
        )
    if error:
        raise RayConnectError(
            f"cannot join the Ray cluster at {address}: {str(error[0]).strip().splitlines()[0]}"
        ) from None
    return False


def _probe(address: str, timeout: float) -> None:
    """A TCP connection to host:port first: a refused or unroutable address fails fast."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and the like: ray.init resolves it, under the same timeout
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise RayConnectError(
            f"cannot reach the Ray cluster at {address}: {reason} "
            "(--ray-timeout); nothing was written"
        ) from None


def _driver_knobs(env: Mapping[str, str] = os.environ) -> dict:
    """The driver's QTTS_* knobs as the actors' environment: an actor on another machine would
    otherwise read that machine's, and run another layer path or sampler than the driver planned."""
    knobs = {k: v for k, v in env.items() if k.startswith("QTTS_")}
    return {"runtime_env": {"env_vars": knobs}} if knobs else {}


def _actors(
    ray: ModuleType, workers: int | None, gpus_per_worker: float | None
) -> tuple[int, float]:
    """(workers, GPUs per worker), checked against the cluster so a job that cannot be hosted
    fails at once with the numbers, not after a long wait."""
    cluster_gpus = float(ray.cluster_resources().get("GPU", 0))
    gpus = gpus_per_worker if gpus_per_worker is not None else (1.0 if cluster_gpus else 0.0)
    if workers is None:
        workers = max(1, int(cluster_gpus // gpus)) if gpus else 1
    if workers * gpus > cluster_gpus:
        raise UsageError(
            f"the Ray cluster has {cluster_gpus:g} GPU(s); --workers {workers} x "
            f"--gpus-per-worker {gpus:g} needs {workers * gpus:g}"
        )
    return workers, gpus
