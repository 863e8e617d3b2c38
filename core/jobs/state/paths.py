"""Every file name in an out dir besides the outputs (docs/job-state.md, "Files in an out dir").
Knows names only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STATE_DIR = ".qtts"
ARCHIVE_DIR = "data"  # OUT/data/: every archive shard, from every writer (stores/presence.py)
LEGACY_JOB_FILE = ".qtts-job.json"  # qtts 0.1 kept its state at the top of the out dir
RAY_PREFIX = "journal-ray-"


@dataclass(frozen=True)
class StatePaths:
    out: Path

    @property
    def dir(self) -> Path:
        return self.out / STATE_DIR

    @property
    def job_file(self) -> Path:
        return self.dir / "job.json"

    @property
    def job_lock(self) -> Path:  # guards the job file and the settings registry
        return self.dir / "job.lock"

    @property
    def settings_file(self) -> Path:
        return self.dir / "settings.json"

    @property
    def refs_file(self) -> Path:
        return self.dir / "refs.json"

    @property
    def results_lock(self) -> Path:
        return self.dir / "results.lock"

    @property
    def view_staging(self) -> Path:  # a results rebuild's columns, staged (output/view_columns)
        return self.dir / "view-columns"

    @property
    def keep_file(self) -> Path:  # the rules metadata.jsonl lists ok rows by (qtts results)
        return self.dir / "keep.json"

    def lock(self, suffix: str) -> Path:
        return self.dir / f"run{suffix}.lock"

    def journal(self, suffix: str) -> Path:
        return self.dir / f"journal{suffix}.jsonl"

    def state(self, suffix: str) -> Path:
        return self.dir / f"state{suffix}.parquet"

    def retract_intent(self, suffix: str) -> Path:  # rows being taken out of archive shards
        return self.dir / f"retract{suffix}.parquet"

    def repack_intent(self, suffix: str, batch: int) -> Path:  # a batch of rows moving layout
        return self.dir / f"repack{suffix}.{batch:06d}.parquet"

    def repack_intents(self, suffix: str) -> list[Path]:
        """A shard's repack intents, oldest first (a run before batches had their own: first)."""
        single = self.dir / f"repack{suffix}.parquet"
        return [single] * single.exists() + sorted(self.dir.glob(f"repack{suffix}.*.parquet"))

    @staticmethod
    def is_repack_intent(name: str, suffix: str) -> bool:
        return name.startswith(f"repack{suffix}.") and name.endswith(".parquet")

    def repack_staging(self, suffix: str) -> Path:  # their records, staged (stores/repack)
        return self.dir / f"repack-columns{suffix}"

    def repack_files(self) -> dict[str, list[Path]]:
        """Every shard's repack files (intents, staged records), by shard suffix."""
        found: dict[str, list[Path]] = {}
        for path in sorted(self.dir.glob("repack*")) if self.dir.is_dir() else []:
            staging = path.name.startswith("repack-columns")
            rest = path.name.removeprefix("repack-columns" if staging else "repack")
            found.setdefault(rest.split(".")[0], []).append(path)
        return found

    def ray_journal(self, actor: str) -> Path:
        return self.dir / f"{RAY_PREFIX}{actor}.jsonl"

    def states(self) -> list[Path]:
        return sorted(self.dir.glob("state*.parquet"))

    def journals(self) -> list[Path]:
        return sorted(self.dir.glob("journal*.jsonl"))

    def own_journals(self, suffix: str) -> list[Path]:
        """A shard's journals: its own, and when unsharded the Ray actors'."""
        own = self.journal(suffix)
        return [
            p for p in self.journals() if p == own or (not suffix and p.name.startswith(RAY_PREFIX))
        ]

    def legacy(self) -> bool:
        """An out dir written by qtts 0.1 (state at the top, no row fingerprints)."""
        return (self.out / LEGACY_JOB_FILE).exists() and not self.dir.exists()
