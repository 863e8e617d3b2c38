"""`qtts voice design`: an instruction -> a voice file, the "design, then clone" workflow.

A VoiceDesign checkpoint speaks the sample line in the voice the instruction describes, as a
one-row `qtts synth` job (its validation, frame budget and retries: a runaway draw is drawn
again) in a scratch folder beside the voice file; the sample's WAV is kept (by default beside
the voice, `narrator.voice` -> `narrator.wav`) and the scratch folder removed. Then a Base
checkpoint makes the voice file from that WAV and the line it speaks (qtts.core.voices.make), in
in-context mode (x-vector only when asked). Knows the job runner and the voice maker; no tensors.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qtts.core.errors import FatalError, UsageError
from qtts.core.jobs.contract.interfaces import LoadSynthesizer, OpenTextModel, ProgressSink
from qtts.core.jobs.contract.spec import (
    FailurePolicy,
    JobSpec,
    ModelOptions,
    OnBudget,
    OutputOptions,
    RowDefaults,
    VoiceOptions,
)
from qtts.core.voices.make import base_checkpoint, check_output, make_voice

SAMPLE_ID = "000001"  # the sample job's one line
STOPPED = (130, 143)  # the job's exit codes after SIGINT, SIGTERM


@dataclass(frozen=True)
class Design:
    """What `qtts voice design` is asked: the voice's description and the line it speaks."""

    instruction: str
    text: str
    model: str  # the VoiceDesign checkpoint
    base: str  # the Base checkpoint the voice is made with
    out: Path
    sample: Path | None = None  # None: beside `out`, with the suffix .wav
    language: str = "auto"
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"
    x_vector_only: bool = False

    @property
    def sample_path(self) -> Path:
        return self.sample or self.out.with_suffix(".wav")


def design_voice(
    design: Design,
    open_text_model: OpenTextModel,
    load_synthesizer: LoadSynthesizer,
    progress: ProgressSink | None = None,
) -> dict[str, Any]:
    """Speak the sample, keep its WAV, make the voice from it; the voice's report plus where the
    sample is. UsageError (exit 2) before anything is synthesized for a bad argument."""
    _check(design, open_text_model)
    work = Path(tempfile.mkdtemp(prefix=f".{design.out.name}.design-", dir=design.out.parent))
    try:
        wav = _speak_sample(design, work, open_text_model, load_synthesizer, progress)
        sample = design.sample_path
        shutil.move(str(wav), sample)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    transcript = None if design.x_vector_only else design.text
    report = make_voice(design.base, sample, transcript, design.out, device=_cpu_or(design.device))
    return {**report, "sample": str(sample), "instruction": design.instruction}


def _check(design: Design, open_text_model: OpenTextModel) -> None:
    if not design.text.strip() or "\n" in design.text.strip():
        raise UsageError("--text: give the sample line, one line of text")
    if not design.instruction.strip():
        raise UsageError("the instruction is empty: describe the voice, e.g. 'a warm, low voice'")
    check_output(design.out)
    if design.sample_path.resolve() == design.out.resolve():
        raise UsageError(f"--sample {design.sample_path} is the voice file itself")
    if not design.sample_path.parent.is_dir():
        raise UsageError(f"--sample {design.sample_path}: no folder {design.sample_path.parent}")
    base_checkpoint(design.base, "--base")  # before any synthesis: a wrong one costs nothing
    model = open_text_model(design.model)
    kind = model.config.tts_model_type
    if kind != "voice_design":
        raise UsageError(
            f"--model {design.model} is a {kind} checkpoint: voice design speaks the sample "
            "with a VoiceDesign checkpoint (and --base makes the voice)"
        )
    try:
        model.normalize_row(None, design.language, design.instruction)
    except ValueError as e:
        raise UsageError(f"--{getattr(e, 'field', 'language')}: {e}") from None


def _speak_sample(design, work, open_text_model, load_synthesizer, progress) -> Path:
    """The sample line as a one-row synth job in `work`; its WAV, or a FatalError (exit 1) with
    the row's reason when it failed."""
    from qtts.core.jobs.execution.run import run_job

    lines = work / "sample.txt"
    lines.write_text(design.text.strip() + "\n", encoding="utf-8")
    spec = JobSpec(
        kind="synth",
        source=str(lines),
        output=OutputOptions(work / "out"),
        model=ModelOptions(design.model, design.device, design.dtype),
        voice=VoiceOptions(
            RowDefaults(language=design.language, instruct=design.instruction, seed=design.seed)
        ),
        failures=FailurePolicy(on_budget=OnBudget.retry),
    )
    summary = run_job(spec, open_text_model, load_synthesizer, progress)
    wav = work / "out" / f"{SAMPLE_ID}.wav"
    if summary.exit_code in STOPPED:
        stopped = FatalError(f"{summary.status}: no voice made")
        stopped.exit_code = summary.exit_code  # 130, 143: as the job exits
        raise stopped
    if summary.ok != 1 or not wav.is_file():
        why = "; ".join(summary.failure_reasons) or summary.status
        raise FatalError(f"the sample line was not spoken ({why}): no voice made")
    return wav


def _cpu_or(device: str) -> str:
    """The voice is made on the CPU unless a GPU was named (its encoders are small)."""
    return "cpu" if device.strip().lower() == "auto" else device
