"""OUT/README.md: the out dir as a Hugging Face dataset, a card that `datasets.load_dataset(OUT)`
and the Hub read as they are, written by every finished run and by `qtts results`.

The YAML header follows the Hub's dataset-card conventions: `configs` pointing at the layout's files
(the files layout's metadata.jsonl AudioFolder with its audio files; the Parquet shards
`data/*.parquet`, with a `filters` on `id` keeping only the rows the keep rules keep, as long as the
list stays under MAX_FILTER_IDS; WebDataset tars as they are; where the rules keep no row, a config
that gives none: NO_ROW), `dataset_info` (the features, audio: Audio at the rows' sampling rate and
the columns, where the loader does not type them itself; `download_size`, the bytes the config
reads, so that datasets' cache of a local folder, keyed by its card, loads afresh once the rows or
the rules change), `task_categories: text-to-speech`, the language tags of the rows and the size
category. The body says which model and settings made the rows, the counts (ok, failed, pending,
kept), the keep rules and the quality summary.

The card carries a marker line: a README.md without it is the user's and is never overwritten; the
card then goes to OUT/.qtts/README.md and the log says so. Every finished `qtts synth` and
`qtts batch`, and a `qtts score` that added scores, writes the card where none is and rewrites it
where the views changed (`refresh_card`), so an out dir loads from its first run on, and a
layout switch or new rows never leave a card pointing at files that are gone. Its Python block
reads the rows back as pasted inside the out dir (the folder it runs in, never the path it was
written at, so a copied or moved out dir still loads): load_dataset(OUT) where the config loads
them, then the archive format's own client (both declared by the format's module, ArchiveFormat.hub
and reads_back). Reads results.parquet's columns and, where the format types its columns itself, one
shard's schema; knows no models.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from qtts.core.jobs.output.results import results_locked
from qtts.core.jobs.state.atomic_files import atomic_write_bytes
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.model.languages import LANGUAGE_TAGS
from qtts.core.quality.card_rows import CardRows, ok_and_kept_ids, read_card_rows

if TYPE_CHECKING:
    from qtts.core.jobs.output.stores.registry import ArchiveFormat

log = logging.getLogger("qtts")
CARD_NAME = "README.md"
# A README.md holding the marker's start is qtts's card (older cards named `qtts results` alone)
MARKER_START = "<!-- qtts dataset card:"
MARKER = f"{MARKER_START} every qtts run here rewrites this file; remove this line to keep it -->"
MAX_FILTER_IDS = 100_000  # ids a Parquet card's filter may list; beyond, every row loads
# Keep rules that keep no row: a filter no id passes (no string sorts before the empty one), typed
# string as `id` is; `[id, in, []]` was typed null, and Arrow refused to compare the two.
NO_ROW = [["id", "<", ""]]
# What load_dataset(OUT) gives then: datasets < 4 has no split of zero rows.
GIVES_NONE = (
    "so load_dataset(OUT) gives none: streamed, no row comes; loaded whole, datasets < 4 stops "
    "with 'Instruction \"train\" corresponds to no data' (it makes no split of zero rows)"
)
SIZES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")]
SIZES += [(1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]
METADATA_FEATURES = {"id": "id", "text": "text", "speaker": "speaker", "language": "language"}
METADATA_FEATURES |= {"duration_s": "duration"}
_DTYPES = {"string": "string", "large_string": "string", "double": "float64", "int64": "int64"}
_DTYPES |= {"bool": "bool", "float": "float32"}
WAV_HEADER = 44  # bytes of a 16-bit PCM WAV file's header


@dataclass(frozen=True)
class Card:
    path: Path  # where it was written
    own_readme: bool  # OUT/README.md is the user's: the card went elsewhere
    quality: dict  # the quality summary it shows (dataset_summary.summarize_results)
    note: str | None = None  # what its config cannot do, or gives when no row is kept


# How long a card waits for the results lock. A run's refresh gives way sooner: the process
# holding the lock is rebuilding the views and refreshes the card itself once it has.
COMMAND_WAIT_S = 60.0
REFRESH_WAIT_S = 5.0


def write_card(out_dir: Path, *, wait_s: float = COMMAND_WAIT_S) -> Card | None:
    """The card for OUT's views as they are now (results.parquet, the keep rules, metadata.jsonl,
    OUT/data/), read and written under the results lock, so no rebuild lands between the views it
    reads and the card it writes (a card older than its views is rewritten by the next refresh;
    a stale one written after them would stay). None where another process holds the lock
    longer than wait_s."""
    with results_locked(out_dir, wait_s) as held:
        return _write(out_dir) if held else None


def refresh_card(out_dir: Path) -> Card | None:
    """The card for the views as they are now, after a run or a score pass: written the first
    time (an out dir without one does not load: Hugging Face's loader reads results.parquet as
    the dataset, beside the shards or instead of the audio), and again whenever the views
    changed (OUT/README.md with the marker, or OUT/.qtts/README.md beside the user's own). None
    where no results exist yet, nothing changed, or it could not be written (a warning: the
    card, never the finished run's exit code). Logs where it went."""
    try:
        if not (out_dir / "results.parquet").exists():
            return None
        with results_locked(out_dir, REFRESH_WAIT_S) as held:
            cards = _cards(out_dir)
            if not held or (cards and _newer_than_views(cards, out_dir)):  # nothing changed
                return None
            card = _write(out_dir)
    except Exception as e:  # noqa: BLE001 -- see above
        log.warning("dataset card not refreshed in %s: %s", out_dir, e)
        return None
    if card.own_readme:  # the user's README.md stays, and load_dataset(OUT) reads theirs
        log.info("dataset card: %s (copy its YAML header into your README.md)", card.path)
    else:
        log.info("dataset card: %s (load_dataset(OUT) reads it)", card.path)
    return card


def _write(out_dir: Path) -> Card:
    from qtts.core.jobs.output.results import read_keep_rules
    from qtts.core.quality.dataset_summary import summarize_results

    path = out_dir / "results.parquet"
    schema = pq.read_schema(path)
    rows = read_card_rows(path)  # a batch at a time: counts and distinct values (card_rows.py)
    counts = {"total": rows.total, "ok": rows.ok, "failed": rows.failed, "pending": rows.pending}
    load = _load(out_dir, rows, schema)
    if load.config is not None:  # datasets caches a folder's load by its card: a new size, a
        load.info["download_size"] = _bytes(out_dir, load.config, rows)  # new load
    header = {
        "pretty_name": out_dir.resolve().name,
        "task_categories": ["text-to-speech"],
        "language": sorted(_languages(rows.languages)),
        "size_categories": [_size(rows.kept if load.note is None else rows.ok)],
        "tags": ["synthetic", "qtts", "qwen3-tts"],
    }
    if not header["language"]:
        del header["language"]
    if load.config is not None:
        header["configs"] = [load.config]
        header["dataset_info"] = load.info
    quality, rules = summarize_results(path), read_keep_rules(out_dir)
    text = _yaml(header) + _body(
        out_dir, counts, quality=quality, rules=rules, rows=rows, load=load
    )
    target = out_dir / CARD_NAME
    own = target.exists() and MARKER_START not in target.read_text("utf-8", errors="replace")
    if own:
        target = StatePaths(out_dir).dir / CARD_NAME
    atomic_write_bytes(target, text.encode("utf-8"))
    return Card(target, own, quality, load.note)


def _cards(out_dir: Path) -> list[Path]:
    """The cards qtts wrote in OUT (README.md with the marker, or .qtts/README.md)."""
    return [p for p in (out_dir / CARD_NAME, StatePaths(out_dir).dir / CARD_NAME) if _is_card(p)]


def _newer_than_views(cards: list[Path], out_dir: Path) -> bool:
    """Every card written after results.parquet and the keep rules last changed."""
    sources = [out_dir / "results.parquet", StatePaths(out_dir).keep_file]
    newest = max((p.stat().st_mtime_ns for p in sources if p.exists()), default=0)
    return all(card.stat().st_mtime_ns > newest for card in cards)


def _is_card(path: Path) -> bool:
    try:
        return MARKER_START in path.read_text("utf-8", errors="replace")
    except OSError:  # none there (or unreadable: not one to rewrite)
        return False


@dataclass(frozen=True)
class CardLoad:
    """What loads the rows as they are: the card's config (None: no Hub loader reads them), its
    dataset_info, a note on what it cannot do, and the rows' archive format (None: files);
    empty: the config gives no row (the keep rules keep none)."""

    config: dict | None = None
    info: dict | None = None
    note: str | None = None
    fmt: ArchiveFormat | None = None
    empty: bool = False


def _load(out_dir: Path, rows: CardRows, schema: pa.Schema) -> CardLoad:
    """How the layout the ok rows are in loads."""
    if rows.ok and rows.in_files == rows.ok:
        return _files_load(out_dir, rows, schema)
    from qtts.core.jobs.output.stores.registry import part_of

    # The archive format of the rows' shards, and how a client loads it, from the output-format
    # registry (never by suffix: a Shar shard's recording part is a .tar too). A plain file is
    # no format's shard (None).
    shards = {part_of(Path(p).name) for p in rows.shard_paths} | (
        {None} if rows.in_files else set()
    )
    formats = {s.fmt for s in shards if s is not None}
    if None in shards or len(formats) != 1:
        return CardLoad(note="the rows' layout has no loader that reads it as it is")
    fmt = formats.pop()
    if fmt.hub is None:
        return CardLoad(note=f"no Hub loader reads the {fmt.name} layout as it is", fmt=fmt)
    config = _config([fmt.hub.pattern])
    note = None
    if rows.kept != rows.ok:  # the shards hold every ok row: the ids are read only here
        note = (
            _filters(config, *ok_and_kept_ids(out_dir / "results.parquet"))
            if fmt.hub.filters_ids
            else f"the {fmt.name} shards load every ok row"
        )
    info = {}
    if fmt.hub.features is not None:
        shard = min(s.shard for s in shards if s is not None)
        info["features"] = fmt.hub.features(out_dir / "data" / fmt.key.name(shard))
    return CardLoad(config, info, note, fmt, empty=config.get("filters") == NO_ROW)


def _files_load(out_dir: Path, rows: CardRows, schema: pa.Schema) -> CardLoad:
    """The files layout: metadata.jsonl (the kept rows) and their audio files, an AudioFolder.
    No row kept: no metadata.jsonl, and a config that gives no row (results.parquet, filtered
    to none): without one, the loader given this folder would list every audio file."""
    if not (out_dir / "metadata.jsonl").is_file():
        config = {**_config(["results.parquet"]), "filters": NO_ROW}
        note = "there is no metadata.jsonl (no row passes the keep rules), and the card's "
        note += f"config points at no row, {GIVES_NONE}"
        return CardLoad(config, {}, note, empty=True)
    audio = {"name": "audio", "dtype": {"audio": {"sampling_rate": rows.sample_rates()[0][0]}}}
    suffixes = sorted(rows.suffixes)
    names = {**METADATA_FEATURES, **{c: c for c in schema.names if c in _score_names()}}
    columns = [_feature(key, schema.field(c).type) for c, key in names.items()]
    config = _config(["metadata.jsonl", *(f"*{s}" for s in suffixes)])
    return CardLoad(config, {"features": [audio, *columns]})


def _rates_line(rates: list[tuple[int, int]]) -> str:
    """ "16000 Hz", or each rate with its rows where they differ."""
    if len(rates) == 1:
        return f"{rates[0][0]} Hz"
    return ", ".join(f"{r} Hz ({n} rows)" for r, n in rates) or "none yet"


def _bytes(out_dir: Path, config: dict, rows: CardRows) -> int:
    """The bytes of what the config reads: every shard; for the files layout, metadata.jsonl and
    the kept rows' 16-bit samples with a WAV header each (exact for WAV, a FLAC file's upper
    bound), from results.parquet's num_samples: no stat a row, at millions of rows."""
    patterns = config["data_files"][0]["path"]
    if patterns[0] != "metadata.jsonl":
        return sum(p.stat().st_size for pattern in patterns for p in out_dir.glob(pattern))
    samples = rows.kept_samples
    return (out_dir / "metadata.jsonl").stat().st_size + 2 * samples + WAV_HEADER * rows.kept


def _config(paths: list[str]) -> dict:
    return {"config_name": "default", "data_files": [{"split": "train", "path": paths}]}


def _filters(config: dict, ok: pa.Table, kept: pa.Table) -> str | None:
    """Keep rules as a filter on `id` (the shards hold every ok row); a note when it cannot."""
    if len(kept) == len(ok):
        return None
    if not len(kept):
        config["filters"] = NO_ROW
        return f"the card's filter on `id` keeps no row (none passes the keep rules), {GIVES_NONE}"
    kept_ids = set(kept["id"].to_pylist())
    dropped = [i for i in ok["id"].to_pylist() if i not in kept_ids]
    op, ids = ("in", sorted(kept_ids)) if len(kept_ids) <= len(dropped) else ("not in", dropped)
    if len(ids) > MAX_FILTER_IDS:
        return f"the keep rules drop {len(dropped):,} rows, too many to list in a filter"
    config["filters"] = [["id", op, ids]]
    return None


def _feature(name: str, type_: pa.DataType) -> dict:
    return {"name": name, "dtype": _DTYPES.get(str(type_), "string")}


def _score_names() -> list[str]:
    from qtts.core.jobs.output.results import SCORE_FIELDS

    return SCORE_FIELDS.names


def _languages(names: set[str]) -> set[str]:
    return {LANGUAGE_TAGS[n.lower()] for n in names if n.lower() in LANGUAGE_TAGS}


def _size(n: int) -> str:
    return next((name for limit, name in SIZES if n < limit), "n>100M")


def _yaml(header: dict) -> str:
    import yaml

    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n"


def _reads(load: CardLoad) -> list[str]:
    """The Python lines that read the out dir back: load_dataset(OUT) where the card's config
    loads a row, then the archive format's own client. The out dir is named relative to where
    they run (inside it), never by the path it was written at: copied or moved, it still loads."""
    loads = load.config is not None and not load.empty
    client = load.fmt.reads_back if load.fmt is not None else ()
    if not loads and not client:
        return []
    lines = ["import os", ""]
    lines += ["# Run inside the out dir, or set OUT to its path: copied or moved, it still loads"]
    lines += ['OUT = os.path.abspath(".")']  # load_dataset(".") has no name to take: absolute
    if loads:
        lines += ["", "from datasets import load_dataset", ""]
        lines += ['ds = load_dataset(OUT, split="train")']
    if client:
        lines.append("")
        lines += [line.replace("{data}", 'OUT + "/data"') for line in client]
    return lines


def _body(out_dir, counts, *, quality, rules, rows: CardRows, load: CardLoad) -> str:
    from qtts.core.quality.dataset_summary import summary_lines

    models, settings = sorted(rows.models), sorted(rows.settings)
    listed = "every ok row" if rules.empty else f"`{rules.describe()}`"
    loads_kept = load.config is not None and load.note is None
    reads = _reads(load)
    lines = [
        MARKER,
        "",
        f"# {out_dir.resolve().name}",
        "",
        "Speech synthesized by qtts, batch text-to-speech with the Qwen3-TTS models. "
        "`results.parquet` holds every row with its outcome, measures and scores; `qtts results` "
        "rewrites this card.",
        "",
        "| rows | ok | failed | pending | kept |",
        "|---|---|---|---|---|",
        f"| {counts['total']} | {counts['ok']} | {counts['failed']} | {counts['pending']} "
        f"| {rows.kept} |",
        "",
        f"- Model: {', '.join(f'`{m}`' for m in models) or 'none yet'}",
        f"- Sample rate: {_rates_line(rows.sample_rates())} (the `sample_rate` column)",
        f"- Settings fingerprint: {', '.join(f'`{s}`' for s in settings) or 'none yet'} (the "
        "`settings` column: the digest of the job settings each row was made with)",
        f"- Keep rules: {listed} (`qtts results --min-dnsmos ...`"
        + ("; kept rows are what load_dataset gives)" if loads_kept else ")"),
        "",
    ]
    if reads:
        lines += ["```python", *reads, "```", ""]
    if load.note:
        lines += [f"Note: {load.note}; `results.parquet`'s `kept` column says which rows pass.", ""]
    summary = summary_lines(quality)
    if summary:
        lines += ["## Quality", "", "```", *summary, "```", ""]
    return "\n".join(lines)
