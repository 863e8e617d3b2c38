"""A row with no seed of its own and no --seed draws with its id's seed (qtts.core.jobs.rows
.id_seeds), so two rows of the same text and voice make different audio; the out dir pins the
rule in .qtts/job.json, and an out dir made by a qtts from before (every such row seed 0) keeps
seed 0, so upgrading redoes none of its rows; --overwrite starts afresh under the new rule. Fake
model (its codes follow the seed), in process."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from cli_calls import qtts

from qtts.core.jobs.rows.validation import id_seed

pytestmark = pytest.mark.usefixtures("fake_model")

ROWS = [{"id": "a1", "text": "The same line."}, {"id": "b2", "text": "The same line."}]


def seeds(out) -> dict[str, int]:
    return {r["id"]: r["seed"] for r in pq.read_table(out / "results.parquet").to_pylist()}


def job_file(out) -> dict:
    return json.loads((out / ".qtts" / "job.json").read_text())


def test_rows_of_the_same_text_and_voice_draw_apart(tmp_path, write_manifest):
    out = tmp_path / "out"
    r = qtts("batch", write_manifest(ROWS), "-o", out, "--speaker", "ryan", "--save-codes")
    assert r.exit_code == 0, r.stderr
    assert seeds(out) == {"a1": id_seed("a1"), "b2": id_seed("b2")}
    a, b = (np.load(out / f"{i}.codes.npy") for i in ("a1", "b2"))
    assert not np.array_equal(a, b)  # a dataset that does not repeat itself
    assert job_file(out)["default_seed"] == "id"
    r = qtts("batch", write_manifest(ROWS), "-o", tmp_path / "given", "--speaker", "ryan",
             "--seed", "0")  # fmt: skip
    assert r.exit_code == 0 and seeds(tmp_path / "given") == {"a1": 0, "b2": 0}


def test_an_out_dir_from_before_keeps_seed_0_and_redoes_nothing(tmp_path, write_manifest):
    """As a qtts from before made it: every row seed 0, and a job file without the pin."""
    m, out = write_manifest(ROWS), tmp_path / "out"
    assert qtts("batch", m, "-o", out, "--speaker", "ryan", "--seed", "0").exit_code == 0
    recorded = job_file(out)
    del recorded["default_seed"]
    (out / ".qtts" / "job.json").write_text(json.dumps(recorded))
    r = qtts("batch", m, "-o", out, "--speaker", "ryan")  # upgraded, no --seed
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert (got["skipped"], got["ok"]) == (2, 0) and "redoing" not in r.stderr
    assert seeds(out) == {"a1": 0, "b2": 0}
    assert job_file(out).get("default_seed", "zero") == "zero"  # absent: the rule from before
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--overwrite")  # afresh: the new rule
    assert r.exit_code == 0 and seeds(out) == {"a1": id_seed("a1"), "b2": id_seed("b2")}
    assert job_file(out)["default_seed"] == "id"
