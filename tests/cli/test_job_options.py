"""The job options are declared once and reach the command as typed settings groups: synth and
batch share every option but the Ray ones and the manifest's column names, and values arrive
parsed (a number, an enum member), never as a dict of raw strings."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from qtts.cli import commands
from qtts.cli.job_options import JobOptions, job_command, scale_out_options
from qtts.core.jobs.contract.choices import AudioFormat, BackendName, Dtype
from qtts.core.jobs.contract.spec import JobKind


def _option_names(command) -> set[str]:
    app = typer.Typer()
    app.command()(command)
    return {p.name for p in typer.main.get_command(app).params}


def test_synth_and_batch_differ_only_by_the_ray_and_column_options():
    synth, batch = _option_names(commands.synth), _option_names(commands.batch)
    ray = {"backend", "ray_address", "workers", "gpus_per_worker", "ray_timeout"}
    columns = {"id_column", "text_column", "column"}
    assert batch - synth == ray | columns | {"manifest"} and synth - batch == {"input"}
    assert {"batch_size", "speaker", "top_k", "format", "on_budget", "num_shards", "quiet"} <= synth


def test_values_arrive_typed_in_their_groups():
    seen = {}

    @job_command(scale_out=scale_out_options)
    def probe(source: str, options: JobOptions) -> None:
        seen.update(source=source, options=options)

    app = typer.Typer()
    app.command()(probe)
    app.command()(lambda: None)  # two commands: the probe is invoked by name
    result = CliRunner().invoke(app, [
        "probe", "rows.parquet", "--batch-size", "4", "--dtype", "float16", "-f", "flac",
        "--fail-fast", "--max-failures", "5", "--backend", "ray", "--workers", "2",
        "-o", "somewhere",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    options = seen["options"]
    model, output, scale_out = options.model, options.output, options.scale_out
    assert model.batch_size == 4 and model.dtype is Dtype.float16
    assert output.audio_format is AudioFormat.flac and str(output.out_dir) == "somewhere"
    assert options.failures.max_failures == 1  # --fail-fast is the lower limit
    assert scale_out.backend is BackendName.ray and scale_out.ray.workers == 2
    assert seen["source"] == "rows.parquet" and options.report.quiet is False
    spec = options.spec(JobKind.batch, seen["source"])
    assert spec.model is model and spec.scale_out.ray.workers == 2


def test_a_value_a_group_refuses_is_a_one_line_usage_error():
    app = typer.Typer()
    app.command()(commands.synth)
    app.command()(commands.batch)
    result = CliRunner().invoke(app, ["batch", "m.parquet", "--device", "tpu"])
    assert result.exit_code == 2
    assert "--device must be auto, cpu, cuda or cuda:N" in result.output
    assert "Traceback" not in result.output
