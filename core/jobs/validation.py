"""Row validation: every input row becomes a Request or a failure with a reason, before any weights
are loaded.

Owns the per-row checks of the dataset-job contract: unsafe id, empty text, unknown speaker or
language (the reason comes from the model and lists what it supports), bad seed, missing reference
audio for Base models, text too long for the frame budget. A null field takes the command-line
default. Knows the TextModel interface and the frame budget; knows no tensors and writes nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from qtts.core.jobs.budget import FrameBudget
from qtts.core.jobs.interfaces import TextModel
from qtts.core.jobs.manifest import InputRow, id_problem
from qtts.core.synthesis.requests import Request

MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class RowDefaults:
    """Command-line values a row takes where its own field is absent or null."""

    speaker: str | None = None
    language: str = "auto"
    instruct: str | None = None
    seed: int = 0


@dataclass
class Validated:
    requests: list[Request] = field(default_factory=list)
    rejected: list[tuple[InputRow, str]] = field(default_factory=list)  # (row, reason)
    estimated_frames: dict[str, int] = field(default_factory=dict)  # request id -> frames
    warnings: Counter[str] = field(default_factory=Counter)  # message -> rows it applies to


def validate_rows(
    rows: list[InputRow],
    model: TextModel,
    budget: FrameBudget,
    defaults: RowDefaults,
    *,
    ref_dir: Path | None = None,
) -> Validated:
    """Check every row. ref_dir: where relative ref_audio paths point (the manifest's folder)."""
    out = Validated()
    for row in rows:
        try:
            request, frames = _validate_row(row, model, budget, defaults, ref_dir, out.warnings)
        except ValueError as e:
            out.rejected.append((row, str(e)))
            continue
        out.requests.append(request)
        out.estimated_frames[request.id] = frames
    return out


def _validate_row(
    row: InputRow,
    model: TextModel,
    budget: FrameBudget,
    defaults: RowDefaults,
    ref_dir: Path | None,
    warnings: Counter[str],
) -> tuple[Request, int]:
    problem = id_problem(row.id)
    if problem:
        raise ValueError(problem)
    if row.text is None or not row.text.strip():
        raise ValueError("empty text" if row.text is not None else "text is null")
    speaker, language, instruct, warning = model.normalize_row(
        _or(row.speaker, defaults.speaker),
        _or(row.language, defaults.language),
        _or(row.instruct, defaults.instruct),
    )
    if warning:
        warnings[warning] += 1
    seed = _seed(row.seed, defaults.seed)
    ref_audio = _ref_audio(row, model, ref_dir, warnings)
    tokens = model.count_text_tokens(row.text)
    too_long = budget.too_long(tokens)
    if too_long:
        raise ValueError(too_long)
    request = Request(
        id=row.id,
        text=row.text,
        row=row.row,
        speaker=speaker,
        language=language,
        instruct=instruct,
        seed=seed,
        ref_audio=ref_audio,
        ref_text=row.ref_text if ref_audio else None,
        max_new_tokens=budget.max_new_tokens(tokens),
    )
    return request, budget.estimate_frames(tokens)


def _or(value: str | None, default: str | None) -> str | None:
    return value if value is not None else default


def _seed(value: object, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, float):
        if value != value:  # NaN: Parquet float columns hold nulls this way
            return default
        if not value.is_integer():
            raise ValueError(f"seed must be an integer, got {value}")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"seed must be an integer, got {value!r}")
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**63 - 1], got {value}")
    return value


def _ref_audio(
    row: InputRow, model: TextModel, ref_dir: Path | None, warnings: Counter[str]
) -> str | None:
    """Absolute path of the row's reference audio (Base models), checked to exist."""
    if model.config.tts_model_type != "base":
        if row.ref_audio is not None:
            warnings["ref_audio ignored: only Base models clone a voice from reference audio"] += 1
        return None
    if row.ref_audio is None:
        raise ValueError("missing ref_audio: Base models clone a voice from reference audio")
    path = Path(row.ref_audio).expanduser()
    if not path.is_absolute() and ref_dir is not None:
        path = ref_dir / path
    if not path.is_file():
        raise ValueError(f"ref_audio not found: {path}")
    return str(path.resolve())
