"""`qtts results OUT --report FILE.html`: the distributions of the ok rows' measures and scores as
pictures, for a person deciding what to keep.

One self-contained page (no scripts, no network, no plotting library): a histogram per column as
inline SVG, with the named thresholds (qtts.core.quality.dataset_summary) and the out dir's keep
rules drawn on it, and the summary's counts in a table. Knows results.parquet's columns; no
models, no audio.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from qtts.core.jobs.output.results import RULES, KeepRules
from qtts.core.jobs.state.atomic_files import atomic_write_bytes
from qtts.core.quality import dataset_summary as ds

BINS = 40
WIDTH, HEIGHT, MARGIN = 560, 180, 28
# The named thresholds drawn on each column's histogram.
MARKS = {
    "repeat_ratio": [ds.LOOPING],
    "silence_ratio": [ds.MOSTLY_SILENT],
    "dnsmos_ovrl": [ds.LOW_DNSMOS],
    "cer": [ds.HIGH_CER],
    "rate_ratio_min": [1 / ds.RATE_DRIFT],
    "rate_ratio_max": [ds.RATE_DRIFT],
}


def write_report(
    results: Path, target: Path, summary: dict, rules: KeepRules, out_dir: Path | None = None
) -> None:
    """FILE.html from results.parquet's ok rows and the summary (summarize_results); out_dir:
    the out dir the page names (default: results.parquet's folder; results.current_views builds it
    aside)."""
    column = ds.OkColumns(results)
    figures = []
    for name in ds.COLUMNS:
        numbers = column.numbers(name)
        if numbers is not None and len(numbers):
            figures.append(_figure(name, numbers, MARKS.get(name, []), _rule_marks(name, rules)))
    page = _page(results.parent if out_dir is None else out_dir, summary, rules, figures)
    atomic_write_bytes(target, page.encode())


def _rule_marks(column: str, rules: KeepRules) -> list[float]:
    return [v for option, v in rules.bounds.items() if RULES[option][0] == column]


def _figure(name: str, values: np.ndarray, marks: list[float], rules: list[float]) -> str:
    """One histogram as an SVG (threshold lines dashed, keep rules solid)."""
    lo, hi = float(values.min()), float(values.max())
    for x in (*marks, *rules):
        lo, hi = min(lo, x), max(hi, x)
    if hi <= lo:
        hi = lo + 1.0
    counts, edges = np.histogram(values, bins=BINS, range=(lo, hi))
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    scale_x = plot_w / (hi - lo)
    top = max(int(counts.max()), 1)
    bar_w = plot_w / BINS
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{name}">'
    ]
    for k, n in enumerate(counts):
        h = plot_h * n / top
        x, y = MARGIN + k * bar_w, MARGIN + plot_h - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 1):.1f}" '
            f'height="{h:.1f}" fill="#4a7ab5"><title>{edges[k]:.4g} to '
            f"{edges[k + 1]:.4g}: {n}</title></rect>"
        )
    for x, style in [*((m, "4 3") for m in marks), *((r, "none") for r in rules)]:
        px = MARGIN + (x - lo) * scale_x
        parts.append(
            f'<line x1="{px:.1f}" y1="{MARGIN}" x2="{px:.1f}" y2="{MARGIN + plot_h}" '
            f'stroke="#c0392b" stroke-dasharray="{style}"/>'
        )
    base = MARGIN + plot_h
    parts.append(
        f'<line x1="{MARGIN}" y1="{base}" x2="{MARGIN + plot_w}" y2="{base}" stroke="#333"/>'
    )
    for x, anchor in ((lo, "start"), (hi, "end")):
        px = MARGIN + (x - lo) * scale_x
        parts.append(
            f'<text x="{px:.1f}" y="{base + 16}" font-size="11" '
            f'text-anchor="{anchor}">{x:.4g}</text>'
        )
    parts.append(
        f'<text x="{MARGIN}" y="{MARGIN - 8}" font-size="11">max {top} rows a bin</text></svg>'
    )
    return f"<h2>{html.escape(name)}</h2>\n<p>{len(values):,} rows</p>\n" + "".join(parts)


def _page(out_dir: Path, summary: dict, rules: KeepRules, figures: list[str]) -> str:
    rows = []
    for name, q in summary["percentiles"].items():
        cells = "".join(f"<td>{q[f'p{p}']:.4g}</td>" for p in ds.PERCENTILES)
        rows.append(f"<tr><td>{html.escape(name)}</td>{cells}<td>{q['n']:,}</td></tr>")
    flags = "".join(
        f"<tr><td>{html.escape(flag)}</td><td>{html.escape(ds.THRESHOLDS[flag])}"
        f"</td><td>{n:,}</td></tr>"
        for flag, n in summary["outside"].items()
    )
    head = "".join(f"<th>p{p}</th>" for p in ds.PERCENTILES)
    kept = (
        ""
        if summary["kept"] is None
        else (
            f"<p>Keep rules <code>{html.escape(rules.describe())}</code>: metadata.jsonl lists "
            f"{summary['kept']:,} of {summary['ok']:,} ok rows (solid red lines).</p>"
        )
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"/>
<title>qtts quality: {html.escape(str(out_dir))}</title>
<style>body{{font-family:sans-serif;max-width:640px;margin:2em auto}}
td,th{{padding:2px 8px;text-align:right}}td:first-child{{text-align:left}}</style>
</head><body>
<h1>Quality of {html.escape(str(out_dir))}</h1>
<p>{summary["ok"]:,} ok rows. Dashed red lines: the named thresholds.</p>
{kept}
<table><tr><th>column</th>{head}<th>rows</th></tr>{"".join(rows)}</table>
<h2>Outside thresholds</h2>
<table><tr><th>flag</th><th>rule</th><th>rows</th></tr>{flags}</table>
{chr(10).join(figures)}
</body></html>
"""
