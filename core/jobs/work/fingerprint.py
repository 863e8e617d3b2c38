"""What shapes a row's output (docs/job-state.md, "The fingerprint and the resume rule"): the job
settings' digest, and their registry in .qtts/settings.json, which says which setting changed.
Knows settings, hashes and one small JSON file; no rows beyond columns, no models."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qtts.core.jobs.contract.spec import FinishOptions
from qtts.core.jobs.state.atomic_files import atomic_write_bytes
from qtts.core.jobs.state.paths import StatePaths

if TYPE_CHECKING:
    from qtts.core.synthesis.requests import GenerationOptions


@dataclass(frozen=True)
class JobFingerprint:
    """What shapes a job's audio (not a settings group: the values the resume rule compares)."""

    values: dict[str, Any]  # JSON-able: model, precision, talker, subtalker, frames, format

    @property
    def digest(self) -> str:
        return digest_of(self.values)


def digest_of(values: Any) -> str:
    text = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def job_fingerprint(
    *,
    model: str,
    precision: str,
    options: GenerationOptions,
    max_new_tokens: int | None,
    audio_format: str,
    finish: FinishOptions = FinishOptions(),
) -> JobFingerprint:
    """options: both sites' merged sampling (every SamplingParams field); finish: acting steps."""
    return JobFingerprint(
        {
            "model": model,
            "precision": precision,
            "talker": asdict(options.talker),
            "subtalker": asdict(options.subtalker),
            "max_new_tokens": max_new_tokens,
            "format": audio_format,
            **finish.fingerprint_part(),
        }
    )


def read_registry(out_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(StatePaths(out_dir).settings_file.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember(out_dir: Path, settings: JobFingerprint) -> None:
    """Add `settings` to the registry (under the job lock: shards share the file)."""
    registry = read_registry(out_dir)
    if registry.get(settings.digest) == settings.values:
        return
    registry[settings.digest] = settings.values
    data = (json.dumps(registry, indent=1) + "\n").encode()
    atomic_write_bytes(StatePaths(out_dir).settings_file, data)


def format_twins(registry: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Digests of recorded settings differing from `current` in the audio format alone."""
    now = json.loads(json.dumps(current))  # as the registry holds it (lists, not tuples)
    rest = {**now, "format": None}
    return [
        digest
        for digest, values in registry.items()
        if isinstance(values, dict)
        and values.get("format") != now.get("format")
        and {**values, "format": None} == rest
    ]


# A setting one side does not have: a finishing step that was off ("sample_rate off -> 16000")
OFF = "off"


def setting_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """ "precision float32 -> bfloat16, talker.temperature 0.9 -> 0.7" (old None: unknown)."""
    if old is None:
        return "settings not recorded (made by an older qtts)"
    parts = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, OFF), new.get(key, OFF)
        if isinstance(a, dict) or isinstance(b, dict):  # a step turned on or off: its entries
            a, b = (v if isinstance(v, dict) else {} for v in (a, b))
            parts += [
                f"{key}.{k} {a.get(k, OFF)} -> {b.get(k, OFF)}"
                for k in sorted(set(a) | set(b))
                if a.get(k, OFF) != b.get(k, OFF)
            ]
        elif a != b:
            parts.append("model (its files changed)" if key == "model" else f"{key} {a} -> {b}")
    return ", ".join(parts) or "settings"
