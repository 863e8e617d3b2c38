"""What a manifest argument names: one Parquet, JSON Lines, CSV or TSV file, or a folder or glob of
Parquet parts in sorted path order (every run and shard sees the same row numbers). A qtts out
dir among the parts is never a part: its results and shards are outputs. Knows paths only."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from qtts.core.errors import ManifestError
from qtts.core.jobs.state.paths import ARCHIVE_DIR, STATE_DIR

KINDS = {
    ".parquet": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",  # NeMo's manifest.json: one object per line
    ".csv": "csv",
    ".tsv": "tsv",
}
ACCEPTED = "a .parquet, .jsonl (.ndjson, .json), .csv or .tsv file, or a folder or glob of .parquet"
GLOB_CHARS = "*?["
# Spark's and Hadoop's files beside the parts (_SUCCESS, _metadata), editors' (.~lock): as pyarrow.
SKIPPED_PREFIXES = (".", "_")


@dataclass(frozen=True)
class ManifestSource:
    given: str  # as on the command line: errors name it
    kind: str  # parquet | jsonl | csv | tsv
    files: tuple[Path, ...]  # one file, or the parts in sorted order
    base_dir: Path  # where relative ref_audio paths point: the file's folder, or the parts' root
    folder: Path | None = None  # the folder of parts, when one was given

    @property
    def is_dataset(self) -> bool:
        """Several parts (a folder or a glob), not one file."""
        return self.folder is not None or is_glob(self.given)

    def inputs(self) -> list[Path]:
        """What the job's views are rebuilt from: the parts, and the folder a new part changes."""
        return [*self.files, *([self.folder] if self.folder is not None else [])]

    def name(self, part: Path) -> str:
        """A part as errors name it: its path under the dataset's root."""
        if not self.is_dataset:
            return self.given
        try:
            return str(part.relative_to(self.base_dir))
        except ValueError:
            return str(part)


def is_glob(source: str) -> bool:
    """A pattern to expand: wildcard characters, and no file or folder of that very name (a
    literal `m[1].parquet` stays itself)."""
    return any(c in source for c in GLOB_CHARS) and not Path(source).expanduser().exists()


def looks_like_manifest(source: str) -> bool:
    """A folder, a glob or a manifest extension (anything else is read as text lines)."""
    return is_glob(source) or Path(source).is_dir() or Path(source).suffix.lower() in KINDS


def find_manifest(source: str, out_dir: Path | None = None) -> ManifestSource:
    """What `source` names; the job's `out_dir` is refused in the parts' folder, or passed over."""
    path = Path(source).expanduser()
    if is_glob(source):
        root = _root(source)
        _check_out_dir(source, root, out_dir)
        matches = sorted(Path(p).absolute() for p in glob.glob(str(path), recursive=True))
        return _parts(source, [p for p in matches if not _in_out_dir(p, root)])
    if path.is_dir():
        root = path.absolute()
        _check_out_dir(source, root, out_dir)
        found = sorted(_parquet_parts(root))
        if not found:
            raise ManifestError(
                f"manifest folder {source} holds no .parquet files (a folder is read as Parquet "
                "parts; pass a JSON Lines or CSV manifest as its file)"
            )
        return ManifestSource(source, "parquet", tuple(found), root, root)
    kind = KINDS.get(path.suffix.lower())
    if kind is None and _is_parquet(path):  # .parq, .pq, no extension: the magic bytes say so
        kind = "parquet"
    if kind is None:
        raise ManifestError(
            f"manifest {source}: unknown extension {path.suffix or '(none)'!r}; qtts batch reads "
            f"{ACCEPTED}"
        )
    return ManifestSource(source, kind, (path,), path.resolve().parent)


def _parts(source: str, matches: list[Path]) -> ManifestSource:
    files = [p for p in matches if p.is_file() and not p.name.startswith(SKIPPED_PREFIXES)]
    if not files:
        raise ManifestError(f"manifest {source}: no file matches")
    other = [p for p in files if p.suffix.lower() != ".parquet"]
    if other:
        raise ManifestError(
            f"manifest {source}: {other[0]} is not a .parquet file (a glob is read as Parquet "
            "parts only)"
        )
    return ManifestSource(source, "parquet", tuple(files), _root(source))


def _root(pattern: str) -> Path:
    """The folder above a glob's first wildcard: the dataset's root."""
    parts = Path(pattern).expanduser().parts
    fixed = next(i for i, p in enumerate(parts) if any(c in p for c in GLOB_CHARS))
    return Path(*parts[:fixed]).absolute() if fixed else Path.cwd()


def _check_out_dir(source: str, root: Path, out_dir: Path | None) -> None:
    """The parts' folder may hold the out dir, never be it, nor its archive folder (or one in
    it): the job's own results.parquet or Parquet shards would be read as parts by the next run."""
    if out_dir is None:
        return
    out, root = out_dir.expanduser().resolve(), root.resolve()
    archives = out / ARCHIVE_DIR
    if out == root or archives == root or archives in root.parents:
        raise ManifestError(
            f"manifest {source}: the out dir {out_dir} writes into the manifest's parts folder, "
            "so its own results.parquet or shards would be read as parts on the next run: pick "
            "an out dir outside the parts' folder (a sub-folder of it is fine)"
        )


def _parquet_parts(root: Path) -> list[Path]:
    """The .parquet files under root, skipping hidden and `_` folders and qtts out dirs."""
    found = []
    for folder, dirs, files in os.walk(root):
        if Path(folder) != root and _is_out_dir(Path(folder)):
            dirs.clear()  # an out dir below the root: outputs, not input
            continue
        dirs[:] = [d for d in dirs if not d.startswith(SKIPPED_PREFIXES)]
        found += [
            Path(folder, f)
            for f in files
            if f.endswith(".parquet") and not f.startswith(SKIPPED_PREFIXES)
        ]
    return found


def _in_out_dir(part: Path, root: Path) -> bool:
    """Under a qtts out dir below a glob's root: a job's outputs, not input."""
    try:
        folders = part.relative_to(root).parents
    except ValueError:
        return False
    return any(_is_out_dir(root / f) for f in folders if f != Path("."))


def _is_out_dir(folder: Path) -> bool:
    """A qtts out dir: it holds a state folder."""
    return (folder / STATE_DIR).is_dir()


def _is_parquet(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def unreadable(where: str, exc: BaseException) -> ManifestError:
    """The reader's own words, first line only: pyarrow's messages run on over many lines."""
    if isinstance(exc, OSError):
        text = exc.strerror or str(exc)  # args[0] of an OSError is its errno
    elif isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])  # str() of a KeyError adds quotes
    else:
        text = str(exc)
    text = text.strip()
    return ManifestError(
        f"cannot read manifest {where}: {text.splitlines()[0] if text else repr(exc)}"
    )
