"""Each failed row is one log line: an id (or reason) with a control character in it is quoted
and escaped as the JSON summary writes it; plain ones are left as they are."""

from __future__ import annotations

import json

import pyarrow as pa

from qtts.core.jobs.execution.summary import FailureLog


def test_a_control_character_in_an_id_stays_on_its_line(caplog):
    caplog.set_level("WARNING", logger="qtts")
    log = FailureLog()
    log.add("good", None, "fake failure")
    log.add("a\nb", None, "unsafe id 'a\\nb': contains a control character")
    log.add_table(pa.table({"id": ["c\x07d\te"], "row": [3], "error": ["two\nlines"]}))
    lines = "\n".join(caplog.messages).splitlines()
    assert lines == [
        "row good: fake failure",
        "row \"a\\nb\": unsafe id 'a\\nb': contains a control character",
        'row "c\\u0007d\\te": "two\\nlines"',
    ]
    assert json.loads(lines[1].split(": ")[0].removeprefix("row ")) == "a\nb"


def test_a_row_with_a_blank_id_is_named_by_its_number(caplog):
    caplog.set_level("WARNING", logger="qtts")
    errors = ["id is empty", "id is empty", "id is null"]
    FailureLog().add_table(pa.table({"id": ["", " ", None], "row": [2, 3, 4], "error": errors}))
    assert caplog.messages == ["row 2 (no id): id is empty", "row 3 (no id): id is empty",
                               "row 4 (no id): id is null"]  # fmt: skip
