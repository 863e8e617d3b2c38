"""The commands: synth (text lines), batch (Parquet manifest), info (a checkpoint's voices).

Thin: parse options, build a JobSpec, call qtts.core.jobs.run.run_job with the model factories,
print the one-line JSON summary on stdout, exit with its code. Core is imported inside the commands
so `qtts --help` never imports torch. The ONE test hook lives here: QTTS_FAKE_SYNTH=<module> makes
the factories come from that module (its open_text_model / load_synthesizer), for subprocess tests.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from qtts.cli import options as o
from qtts.cli.errors import cli_errors
from qtts.cli.progress import BarAwareHandler, Progress

FAKE_ENV = "QTTS_FAKE_SYNTH"


def factories():
    """(open_text_model, load_synthesizer): the real ones, or QTTS_FAKE_SYNTH's module's."""
    name = os.environ.get(FAKE_ENV, "").strip()
    if name:
        module = importlib.import_module(name)
        return module.open_text_model, module.load_synthesizer
    from qtts.core.synthesis import session

    return session.open_text_model, session.load_synthesizer


def setup_logging(quiet: bool, verbose: bool) -> None:
    logger = logging.getLogger("qtts")
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    for h in [h for h in logger.handlers if getattr(h, "_qtts", False)]:
        logger.removeHandler(h)  # a fresh handler on today's sys.stderr (tests swap it)
    handler = BarAwareHandler(sys.stderr)  # log lines print above a progress bar
    handler.setFormatter(
        logging.Formatter("%(asctime)s qtts %(levelname)s: %(message)s", "%Y-%m-%d %H:%M:%S")
    )
    handler._qtts = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.propagate = False


def run_command(kind: str, source: str, a: dict[str, Any]) -> None:
    """Shared body of synth and batch; `a` holds the command's parsed options."""
    setup_logging(a["quiet"], a["verbose"])
    with cli_errors():
        from qtts.core.errors import UsageError
        from qtts.core.jobs.run import run_job
        from qtts.core.jobs.spec import JobSpec, SamplingOverrides
        from qtts.core.jobs.validation import RowDefaults

        limits = [n for n in (1 if a["fail_fast"] else None, a["max_failures"]) if n is not None]
        try:
            spec = JobSpec(
                kind=kind, source=source, out_dir=a["out_dir"], model=a["model"],
                device=a["device"], dtype=a["dtype"].value,
                batch_size=o.parse_batch_size(a["batch_size"]),
                max_new_tokens=a["max_new_tokens"],
                row_defaults=RowDefaults(a["speaker"], a["language"], a["instruct"], a["seed"]),
                sampling=SamplingOverrides(
                    greedy=a["greedy"], temperature=a["temperature"], top_k=a["top_k"],
                    top_p=a["top_p"], repetition_penalty=a["repetition_penalty"],
                    subtalker_temperature=a["subtalker_temperature"],
                    subtalker_top_k=a["subtalker_top_k"], subtalker_top_p=a["subtalker_top_p"],
                ),
                audio_format=a["format"].value, save_codes=a["save_codes"],
                overwrite=a["overwrite"], max_failures=min(limits) if limits else None,
                on_budget=a["on_budget"].value,
                ref_audio=None if a["ref_audio"] is None else str(a["ref_audio"]),
                ref_text=a["ref_text"], x_vector_only=a["x_vector_only"],
                num_shards=a["num_shards"], shard_index=a["shard_index"],
                backend=a["backend"].value if "backend" in a else "local",
                ray_address=a.get("ray_address"), workers=a.get("workers"),
                gpus_per_worker=a.get("gpus_per_worker"), ray_timeout=a.get("ray_timeout", 30.0),
                dry_run=a["dry_run"], input_moved=a["input_moved"],
            )  # fmt: skip
        except ValueError as e:
            raise UsageError(str(e)) from None
        progress = Progress(quiet=a["quiet"], log_interval=a["log_interval"])
        open_text_model, load_synthesizer = factories()
        summary = run_job(spec, open_text_model, load_synthesizer, progress)
    typer.echo(json.dumps(summary.as_dict()))
    level = logging.WARNING if summary.exit_code else logging.INFO
    logging.getLogger("qtts").log(level, "%s", summary.describe())
    raise typer.Exit(summary.exit_code)


def synth(
    input: Annotated[
        str, typer.Argument(help="UTF-8 text file, one utterance per line; - = stdin.")
    ],
    model: o.Model = o.DEFAULT_MODEL,
    device: o.Device = "auto",
    dtype: o.DtypeOpt = o.Dtype.auto,
    batch_size: o.BatchSize = "auto",
    max_new_tokens: o.MaxNewTokens = None,
    speaker: o.Speaker = None,
    language: o.Language = "auto",
    instruct: o.Instruct = None,
    ref_audio: o.RefAudio = None,
    ref_text: o.RefText = None,
    x_vector_only: o.XVectorOnly = False,
    seed: o.Seed = 0,
    greedy: o.Greedy = False,
    temperature: o.Temperature = None,
    top_k: o.TopK = None,
    top_p: o.TopP = None,
    repetition_penalty: o.RepetitionPenalty = None,
    subtalker_temperature: o.SubTemperature = None,
    subtalker_top_k: o.SubTopK = None,
    subtalker_top_p: o.SubTopP = None,
    out_dir: o.OutDir = Path("out"),
    format: o.Format = o.AudioFormat.wav,
    save_codes: o.SaveCodes = False,
    overwrite: o.Overwrite = False,
    input_moved: o.InputMoved = False,
    dry_run: o.DryRun = False,
    num_shards: o.NumShards = None,
    shard_index: o.ShardIndex = None,
    fail_fast: o.FailFast = False,
    max_failures: o.MaxFailures = None,
    on_budget: o.OnBudgetOpt = o.OnBudget.ok,
    log_interval: o.LogInterval = 30.0,
    quiet: o.Quiet = False,
    verbose: o.Verbose = False,
) -> None:
    """Speak each non-empty line of a text file: line n -> OUT/{n:06d}.wav (blank lines count)."""
    run_command("synth", input, locals())


def batch(
    manifest: Annotated[
        str, typer.Argument(help="Parquet with id, text [, speaker, language, instruct, seed, ...]")
    ],
    model: o.Model = o.DEFAULT_MODEL,
    device: o.Device = "auto",
    dtype: o.DtypeOpt = o.Dtype.auto,
    batch_size: o.BatchSize = "auto",
    max_new_tokens: o.MaxNewTokens = None,
    speaker: o.Speaker = None,
    language: o.Language = "auto",
    instruct: o.Instruct = None,
    ref_audio: o.RefAudio = None,
    ref_text: o.RefText = None,
    x_vector_only: o.XVectorOnly = False,
    seed: o.Seed = 0,
    greedy: o.Greedy = False,
    temperature: o.Temperature = None,
    top_k: o.TopK = None,
    top_p: o.TopP = None,
    repetition_penalty: o.RepetitionPenalty = None,
    subtalker_temperature: o.SubTemperature = None,
    subtalker_top_k: o.SubTopK = None,
    subtalker_top_p: o.SubTopP = None,
    out_dir: o.OutDir = Path("out"),
    format: o.Format = o.AudioFormat.wav,
    save_codes: o.SaveCodes = False,
    overwrite: o.Overwrite = False,
    input_moved: o.InputMoved = False,
    dry_run: o.DryRun = False,
    num_shards: o.NumShards = None,
    shard_index: o.ShardIndex = None,
    backend: o.BackendOpt = o.Backend.local,
    ray_address: o.RayAddress = None,
    workers: o.Workers = None,
    gpus_per_worker: o.GpusPerWorker = None,
    ray_timeout: o.RayTimeout = 30.0,
    fail_fast: o.FailFast = False,
    max_failures: o.MaxFailures = None,
    on_budget: o.OnBudgetOpt = o.OnBudget.ok,
    log_interval: o.LogInterval = 30.0,
    quiet: o.Quiet = False,
    verbose: o.Verbose = False,
) -> None:
    """Speak every row of a Parquet manifest: row -> OUT/{id}.wav, plus OUT/results.parquet.

    Columns: id (string, unique, filename-safe) and text are required; speaker, language,
    instruct, ref_audio, ref_text and seed (int) are optional, a null taking the option's value.
    """
    run_command("batch", manifest, locals())


def info(
    model: Annotated[str, typer.Argument(help="Local checkpoint dir or HF repo id.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Show a checkpoint's type, size, speakers, languages and sampling defaults."""
    setup_logging(quiet=False, verbose=False)
    with cli_errors():
        open_text_model, _ = factories()
        details = describe(open_text_model(model))
    if as_json:
        typer.echo(json.dumps(details))
        return
    for key, value in details.items():
        if isinstance(value, dict):
            typer.echo(f"{key}:")
            for k, v in value.items():
                typer.echo(f"  {k}: {_plain(v)}")
        else:
            typer.echo(f"{key}: {_plain(value)}")


def describe(tm) -> dict[str, Any]:
    cfg, d = tm.config, tm.defaults

    def site(p) -> dict[str, Any]:
        return {"do_sample": p.do_sample, "temperature": p.temperature, "top_k": p.top_k,
                "top_p": p.top_p, "repetition_penalty": p.repetition_penalty}  # fmt: skip

    return {
        "model": tm.name,
        "type": cfg.tts_model_type,
        "size": model_size(cfg),
        "sample_rate": tm.sample_rate,
        "speakers": cfg.supported_speakers(),
        "languages": cfg.supported_languages(),
        "instruct": "honoured" if cfg.honours_instruct else "ignored (0.6B CustomVoice)",
        "talker_sampling": site(d.talker),
        "subtalker_sampling": site(d.subtalker),
        "max_new_tokens": d.max_new_tokens,
    }


def model_size(cfg) -> str:
    """0.6B / 1.7B when the dimensions are the published ones; else the layout and the dims."""
    from qtts.core.model.sizes import SIZES

    name = {"0b6": "0.6b", "1b7": "1.7b"}.get(cfg.tts_model_size)
    t = cfg.talker
    if name is not None and (t.hidden_size, t.num_hidden_layers) == (
        SIZES[name]["hidden"],
        SIZES[name]["layers"],
    ):
        return name.upper()
    layout = f"{name.upper()} layout" if name else "unknown layout"
    return f"{layout}, custom dimensions (talker {t.hidden_size} x {t.num_hidden_layers} layers)"


def _plain(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "(none)"
    return str(value)
