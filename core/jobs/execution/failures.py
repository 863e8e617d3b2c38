"""Failed rows, said on the terminal: the first few as `row ID: reason`, the rest counted by
reason, and the most common reasons for the summary. Knows strings and a logger."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("qtts")

SHOWN_IN_FULL = 20
TOP_REASONS = 5


class FailureLog:
    def __init__(self) -> None:
        self.reasons: Counter[str] = Counter()
        self.count = 0

    def add(self, row_id: str | None, row: int | None, reason: str) -> None:
        self.count += 1
        self.reasons[reason] += 1
        if self.count <= SHOWN_IN_FULL:
            named = row_id is not None and row_id.strip()  # a blank id names nothing
            name = f"row {one_line(row_id)}" if named else f"row {row} (no id)"
            log.warning("%s: %s", name, one_line(str(reason)))

    def add_table(self, rows: pa.Table) -> None:
        """rows: an Arrow table with id, row and error: the first few said, all counted."""
        if rows.num_rows == 0:
            return
        import pyarrow.compute as pc

        shown = max(SHOWN_IN_FULL - self.count, 0)
        for r in rows.slice(0, shown).select(["id", "row", "error"]).to_pylist():
            self.add(r["id"], r["row"], r["error"])
        rest = rows.slice(shown)
        self.count += rest.num_rows
        for item in pc.value_counts(rest["error"]).to_pylist():
            self.reasons[item["values"]] += item["counts"]

    def close(self) -> None:
        """After the job: how many more failed, by reason."""
        hidden = self.count - SHOWN_IN_FULL
        if hidden > 0:
            log.warning(
                "... and %d more failed row(s); by reason: %s",
                hidden,
                "; ".join(f"{r} ({n})" for r, n in self.reasons.most_common()),
            )

    def top(self) -> dict[str, int]:
        return dict(self.reasons.most_common(TOP_REASONS))


def one_line(text: str) -> str:
    """text as it is, or, holding a control character (a newline in an id), quoted and escaped
    as the JSON summary writes it: one failure, one log line."""
    return text if text.isprintable() else json.dumps(text)
