"""Which ok rows metadata.jsonl lists: the thresholds given to `qtts results` (--min-dnsmos 3.0
--max-cer 0.1 ...), kept in OUT/.qtts/keep.json so that every later rebuild applies them;
results.parquet says in `kept` whether each ok row passes. A row lacking a value a rule needs does
not pass (but NULL_PASSES). Knows columns and one small file; no models, no audio.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import UsageError
from qtts.core.jobs.state.atomic_files import atomic_write_bytes
from qtts.core.jobs.state.paths import StatePaths

# Each rule: its option (what the user typed, without "--"), the column it reads, and whether
# the value is a floor (the column must be at least it) or a ceiling (at most it).
RULES = {
    "min-dnsmos": ("dnsmos_ovrl", "floor"),
    "max-cer": ("cer", "ceiling"),
    "max-wer": ("wer", "ceiling"),
    "max-repeat-ratio": ("repeat_ratio", "ceiling"),
    "max-silence-ratio": ("silence_ratio", "ceiling"),
    "min-chars-per-s": ("chars_per_s", "floor"),
    "max-chars-per-s": ("chars_per_s", "ceiling"),
    "min-speaker-sim": ("speaker_sim", "floor"),
    "min-speaker-centroid": ("speaker_sim_centroid", "floor"),
    # the speaking rate against its voice's median (voice_rates.py): a split row's slowest and
    # fastest segments
    "min-rate-ratio": ("rate_ratio_min", "floor"),
    "max-rate-ratio": ("rate_ratio_max", "ceiling"),
}
# A null in the first column passes its rule when the second has a value: Chinese and Japanese
# rows have a CER and, by design, no WER (qtts score), so --max-wer leaves them to --max-cer.
NULL_PASSES = {"wer": "cer"}
NO_BUDGET_HITS = "no-budget-hits"  # rows kept flagged hit_frame_budget (--on-budget ok) left out
KEPT = "kept"  # the results' column: whether an ok row passes the rules (null: not ok)


@dataclass(frozen=True)
class KeepRules:
    bounds: dict[str, float] = field(default_factory=dict)  # option -> threshold
    no_budget_hits: bool = False

    def __post_init__(self) -> None:
        for option, value in self.bounds.items():
            if option not in RULES:
                raise UsageError(f"unknown keep rule --{option}")
            if not np.isfinite(value):
                raise UsageError(f"--{option} {value}: give a finite number")

    @property
    def empty(self) -> bool:
        return not self.bounds and not self.no_budget_hits

    def describe(self) -> str:
        """The rules as the options that set them."""
        parts = [f"--{option} {value:g}" for option, value in sorted(self.bounds.items())]
        return " ".join(parts + ([f"--{NO_BUDGET_HITS}"] if self.no_budget_hits else []))

    def passes(self, table: pa.Table | pa.RecordBatch) -> np.ndarray:
        """bool [rows]: each row meets every rule (a missing column or a null value fails)."""
        ok = np.ones(table.num_rows, dtype=bool)
        for option, value in self.bounds.items():
            column, kind = RULES[option]
            if column not in table.schema.names:
                return np.zeros(table.num_rows, dtype=bool)
            values = table[column]
            meets = (
                pc.greater_equal(values, value) if kind == "floor" else pc.less_equal(values, value)
            )
            other = NULL_PASSES.get(column)
            if other in table.schema.names:
                meets = pc.if_else(pc.is_null(values), pc.is_valid(table[other]), meets)
            ok &= pc.fill_null(meets, False).to_numpy(zero_copy_only=False)
        if self.no_budget_hits:
            hit = pc.fill_null(table["hit_frame_budget"], True).to_numpy(zero_copy_only=False)
            ok &= ~hit
        return ok

    def columns(self) -> set[str]:
        """The columns the rules read."""
        used = {RULES[option][0] for option in self.bounds}
        return used | ({"hit_frame_budget"} if self.no_budget_hits else set())


def read_keep_rules(out_dir: Path) -> KeepRules:
    """The out dir's rules (none when it has no keep.json)."""
    path = StatePaths(out_dir).keep_file
    try:
        data = json.loads(path.read_text())
        return KeepRules(dict(data.get("bounds", {})), bool(data.get("no_budget_hits", False)))
    except FileNotFoundError:
        return KeepRules()
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        raise UsageError(
            f"cannot read {path} ({exc}): set the rules again (qtts results OUT "
            "--min-dnsmos ...) or clear them (--keep-all)"
        ) from None


def write_keep_rules(out_dir: Path, rules: KeepRules) -> None:
    """Save the rules (atomically); empty rules remove the file."""
    path = StatePaths(out_dir).keep_file
    if rules.empty:
        path.unlink(missing_ok=True)
        return
    data = {"bounds": rules.bounds, "no_budget_hits": rules.no_budget_hits}
    atomic_write_bytes(path, (json.dumps(data, sort_keys=True, indent=1) + "\n").encode())
