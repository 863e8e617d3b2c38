"""The precision a job settles on, and the out dir's pin of `--dtype auto` on a CPU: the pin wins
over this CPU's choice, an explicit --dtype runs as given and leaves it alone, --overwrite
resolves afresh, a job file from before the pin counts as float32, and a pin recorded by another
run in the meantime is refused (core/jobs/work/precision.py, core/jobs/state/jobfile.py)."""

import json
from dataclasses import replace

import pytest

from qtts.core.errors import UsageError
from qtts.core.jobs.state.jobfile import JobFile, read_job_file, write_job_file
from qtts.core.jobs.work.precision import cpu_auto_for_job_file, for_ray_actors, settle_precision


class Cpu:
    """A TextModel's resolve_precision on a CPU whose auto choice is `auto`."""

    def __init__(self, auto: str) -> None:
        self.auto = auto

    def resolve_precision(self, device, dtype):
        return ("cpu", self.auto, f"this CPU picks {self.auto}") if dtype == "auto" else (
            "cpu", dtype, "")  # fmt: skip


class Gpu:
    def resolve_precision(self, device, dtype):
        return "cuda", "bfloat16" if dtype == "auto" else dtype, "bfloat16 on CUDA"


def job(pin):
    return JobFile("batch", "/m.parquet", cpu_auto_dtype=pin)


def test_cpu_auto_takes_the_pin_over_this_cpus_choice():
    p = settle_precision(Cpu("float32"), "cpu", "auto", job("bfloat16"), overwrite=False)
    assert (str(p), p.cpu_auto) == ("cpu:bfloat16", "bfloat16")
    assert "as this out dir first resolved it" in p.why and "would pick float32" in p.why
    p = settle_precision(Cpu("bfloat16"), "cpu", "auto", job("bfloat16"), overwrite=False)
    assert "would pick" not in p.why


@pytest.mark.parametrize("recorded", [None, job(None)])
def test_cpu_auto_without_a_pin_is_this_cpus_choice(recorded):
    p = settle_precision(Cpu("bfloat16"), "cpu", "auto", recorded, overwrite=False)
    assert (str(p), p.cpu_auto, p.why) == ("cpu:bfloat16", "bfloat16",
                                           "--dtype auto: this CPU picks bfloat16")  # fmt: skip


def test_overwrite_resolves_afresh():
    p = settle_precision(Cpu("float32"), "cpu", "auto", job("bfloat16"), overwrite=True)
    assert (str(p), p.cpu_auto) == ("cpu:float32", "float32")


def test_an_explicit_dtype_or_a_gpu_runs_as_resolved_and_pins_nothing():
    p = settle_precision(Cpu("bfloat16"), "cpu", "float32", job("bfloat16"), overwrite=False)
    assert (str(p), p.cpu_auto, p.why) == ("cpu:float32", None, "--dtype float32")
    p = settle_precision(Gpu(), "cuda", "auto", job("float32"), overwrite=False)
    assert (str(p), p.cpu_auto, p.why) == ("cuda:bfloat16", None, "--dtype auto: bfloat16 on CUDA")


def test_what_write_job_files_pins():
    assert cpu_auto_for_job_file("out", None, "bfloat16", overwrite=False) == "bfloat16"
    assert cpu_auto_for_job_file("out", job(None), "float32", overwrite=False) == "float32"
    assert cpu_auto_for_job_file("out", job("bfloat16"), "bfloat16", overwrite=False) == "bfloat16"
    assert cpu_auto_for_job_file("out", job("bfloat16"), None, overwrite=False) == "bfloat16"
    assert cpu_auto_for_job_file("out", job("bfloat16"), None, overwrite=True) == "bfloat16"
    assert cpu_auto_for_job_file("out", None, None, overwrite=False) is None
    # --overwrite resolves afresh over the pin it saw before the lock
    assert cpu_auto_for_job_file("out", job("bfloat16"), "float32", overwrite=True,
                              seen="bfloat16") == "float32"  # fmt: skip


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_pin_recorded_meanwhile_by_another_run_is_refused(overwrite):
    """Two runs start at once (shards of one array, with or without --overwrite) on CPUs that
    pick differently: the one that records second sees a pin it did not see before the lock."""
    with pytest.raises(UsageError, match="out was just recorded with --dtype auto = float32 on "
                                         "CPU by another run; run again to join it"):  # fmt: skip
        cpu_auto_for_job_file("out", job("float32"), "bfloat16", overwrite=overwrite, seen=None)


def test_settle_remembers_the_pin_it_saw():
    p = settle_precision(Cpu("float32"), "cpu", "auto", job("bfloat16"), overwrite=True)
    assert (p.dtype, p.seen) == ("float32", "bfloat16")
    assert settle_precision(Cpu("float32"), "cpu", "auto", None, overwrite=False).seen is None


def test_ray_actors_with_device_auto_resolve_it_themselves():
    """--backend ray --device auto: nothing pinned, and a driver without a GPU records what qtts
    always recorded there (cpu:float32), whatever its own CPU would pick."""
    for cpu in (Cpu("bfloat16"), Cpu("float32")):
        for recorded in (None, job("bfloat16")):
            p = for_ray_actors(settle_precision(cpu, "auto", "auto", recorded, overwrite=False))
            assert (str(p), p.cpu_auto) == ("cpu:float32", None)
    explicit = for_ray_actors(settle_precision(Cpu("float32"), "auto", "bfloat16", None,
                                               overwrite=False))  # fmt: skip
    assert (str(explicit), explicit.cpu_auto) == ("cpu:bfloat16", None)
    gpu = for_ray_actors(settle_precision(Gpu(), "auto", "auto", None, overwrite=False))
    assert (str(gpu), gpu.cpu_auto) == ("cuda:bfloat16", None)


def test_the_job_file_always_writes_the_key_and_one_without_it_counts_as_float32(tmp_path):
    (tmp_path / ".qtts").mkdir()
    write_job_file(tmp_path, job(None))
    assert json.loads((tmp_path / ".qtts" / "job.json").read_text())["cpu_auto_dtype"] is None
    assert read_job_file(tmp_path).cpu_auto_dtype is None
    old = {"kind": "batch", "source": "/m.parquet", "num_shards": 1, "format": 2}
    (tmp_path / ".qtts" / "job.json").write_text(json.dumps(old))
    assert read_job_file(tmp_path) == replace(job("float32"), default_seed="zero")  # seed 0 too
    (tmp_path / ".qtts" / "job.json").write_text(json.dumps(old | {"cpu_auto_dtype": "fp8"}))
    with pytest.raises(UsageError, match="job.json: cpu_auto_dtype must be bfloat16 or float32"):
        read_job_file(tmp_path)


def test_a_job_file_with_keys_this_qtts_does_not_know_is_read(tmp_path):
    """What lets an older qtts (FORMAT 2) read a job file with cpu_auto_dtype: unknown keys
    are dropped, not refused."""
    data = {"kind": "batch", "source": "/m.parquet", "format": 2, "some_later_key": 1}
    (tmp_path / ".qtts").mkdir()
    (tmp_path / ".qtts" / "job.json").write_text(json.dumps(data))
    assert read_job_file(tmp_path).source == "/m.parquet"


def test_a_pinned_bf16_on_a_cpu_without_bf16_units_is_a_warning(caplog):
    """Mixed CPUs: the shard on the fp32-only CPU runs the pinned bf16 (same results as the
    others), and says that it is emulated there."""
    import logging

    from qtts.core.jobs.work.precision import log_precision

    p = settle_precision(Cpu("float32"), "cpu", "auto", job("bfloat16"), overwrite=False)
    assert p.emulated
    with caplog.at_level(logging.INFO, logger="qtts"):
        log_precision(p)
        log_precision(settle_precision(Cpu("bfloat16"), "cpu", "auto", job("bfloat16"),
                                       overwrite=False))  # fmt: skip
    levels = [(r.levelname, "emulates bf16" in r.getMessage()) for r in caplog.records]
    assert levels == [("WARNING", True), ("INFO", False)]
