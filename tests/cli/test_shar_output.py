"""--output shar end to end, on the fake model: lhotse's own reader (`CutSet.from_shar`) gets the
files layout's audio, codes and text row for row; the archive rules the other formats meet hold
for a shard of three files: a kill -9 mid-shard or between a seal's renames, a rerun redoing rows
of sealed shards, two shard tasks in one OUT/data/ and layout switches into and out of Shar
(killed at their steps too) all end with every id exactly once; `qtts score` reads its members.
Ray units: tests/cli/test_ray_backend.py."""

from __future__ import annotations

import io
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from fakes import fake_env, qtts_cmd
from layout_switch import IDS, KILL_POINTS, ROWS, STORES, qtts, summary

lhotse = pytest.importorskip("lhotse")  # the test extra
pytestmark = pytest.mark.usefixtures("fake_model")

TEXTS = [f"Row {i} of a Shar job." for i in range(ROWS)]


def _manifest(path: Path, texts=TEXTS) -> Path:
    pq.write_table(pa.table({"id": IDS[: len(texts)], "text": texts}), path)
    return path


def shar(out: Path) -> dict[str, tuple[np.ndarray, np.ndarray | None, str]]:
    """id -> (16-bit samples, codes, text), as lhotse reads OUT/data (it refuses a folder whose
    fields do not line up: a shard missing a file)."""
    got = {}
    for cut in lhotse.CutSet.from_shar(in_dir=out / "data"):
        assert cut.id not in got, cut.id
        encoded = cut.recording.sources[0].source  # the member's bytes, as lhotse read them
        audio = sf.read(io.BytesIO(encoded), dtype="int16")[0]
        np.testing.assert_allclose(cut.load_audio()[0], audio / 32768, atol=1e-6)
        codes = cut.load_custom("codes") if cut.has_custom("codes") else None
        got[cut.id] = (audio, codes, cut.supervisions[0].text)
    return got


def copies(out: Path) -> Counter:
    """Every id's audio anywhere: plain files, WebDataset tars, Shar recording tars (the key
    part: where a Shar row's audio is)."""
    found = Counter(p.name.split(".")[0] for p in out.iterdir() if p.suffix in (".wav", ".flac"))
    for shard in sorted((out / "data").glob("*.tar")) if (out / "data").exists() else []:
        if shard.name.startswith("codes."):
            continue
        with tarfile.open(shard) as tar:
            audio = [m.name for m in tar if m.name.endswith((".wav", ".flac"))]
        found.update(name.rsplit(".", 1)[0] for name in audio)
    return found


def files(out: Path) -> dict[str, tuple[np.ndarray, np.ndarray, str]]:
    texts = dict(zip(IDS, TEXTS, strict=True))
    return {p.stem: (sf.read(p, dtype="int16")[0], np.load(out / f"{p.stem}.codes.npy"),
                     texts[p.stem]) for p in out.glob("*.wav")}  # fmt: skip


def same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for row_id, (audio, codes, text) in want.items():
        np.testing.assert_array_equal(got[row_id][0], audio)
        np.testing.assert_array_equal(got[row_id][1], codes)
        assert got[row_id][2] == text


def litter(out: Path) -> list[str]:
    return [p.name for p in out.rglob("*") if ".qtts-tmp-" in p.name]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A finished files out dir and a finished Shar one (shards of 3 rows) of the same rows."""
    root = tmp_path_factory.mktemp("made")
    manifest = _manifest(root / "m.parquet")
    for layout in ("files", "shar"):
        r = subprocess.run(qtts_cmd("batch", manifest, "-o", root / layout, "--speaker", "vivian",
                                    "--model", "fake-0.6b", "--save-codes", "-q", "--output",
                                    layout, "--shard-rows", 3),
                           env=fake_env(), capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr
    return manifest, root / "files", root / "shar"


def test_lhotse_reads_the_files_layouts_audio_codes_and_text(made):
    _, files_out, shar_out = made
    same(shar(shar_out), files(files_out))
    names = sorted(p.name for p in (shar_out / "data").iterdir())
    assert len(names) == 12 and names[0].startswith("codes.") and names[-1].startswith("record")
    results = pq.read_table(shar_out / "results.parquet").to_pylist()
    assert all(Path(r["path"]).name.startswith("recording.") for r in results)
    assert all(r["member"] == f"{r['id']}.wav" for r in results)
    assert not (shar_out / "metadata.jsonl").exists()


def test_a_kill_mid_shard_then_a_rerun_keeps_every_id_once(tmp_path):
    manifest = _manifest(tmp_path / "m.parquet")
    out = tmp_path / "out"
    args = ("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out, "-q",
            "--save-codes", "--output", "shar", "--shard-rows", 3)  # fmt: skip
    proc = subprocess.Popen(qtts_cmd(*args), env=fake_env(QTTS_FAKE_DELAY="0.15"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline, sealed = time.monotonic() + 60, []
    while time.monotonic() < deadline and not sealed:
        sealed = list((out / "data").glob("recording.*.tar"))
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert sealed, "no shard was sealed before the kill"
    r = qtts(manifest, out, "--output", "shar", "--shard-rows", 3)
    assert r.exit_code == 0, r.stderr
    assert sorted(shar(out)) == IDS and litter(out) == []


def kill_at(target: tuple, manifest, out, *extra, **env) -> None:
    name, n, when = target
    args = ["batch", manifest, "-o", out, "--speaker", "vivian", "--model", "fake-0.6b",
            "--save-codes", "-q", *extra]  # fmt: skip
    cmd = [sys.executable, str(KILL_POINTS), name, str(n), when, "--", *map(str, args)]
    proc = subprocess.run(cmd, env=fake_env(**env), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr  # killed where asked, not before or after


def test_a_kill_between_a_seals_renames_is_healed_by_the_next_run(tmp_path):
    """The first shard's cuts file has its name, its codes and recording tars not: its rows
    are journalled but their key part is missing, so the next run redoes them and takes the
    lone file out."""
    manifest = _manifest(tmp_path / "m.parquet")
    out = tmp_path / "out"
    kill_at((f"{STORES}.shard_files:_rename", 1, "after"), manifest, out, "--output", "shar",
            "--shard-rows", 3)  # fmt: skip
    assert [p.name.split(".")[0] for p in (out / "data").iterdir() if p.name[0] != "."] == ["cuts"]
    r = qtts(manifest, out, "--output", "shar", "--shard-rows", 3)
    assert r.exit_code == 0 and summary(r)["ok"] == ROWS, r.stderr
    assert sorted(shar(out)) == IDS and litter(out) == []
    assert len(list((out / "data").iterdir())) == 12


def test_a_rerun_redoing_rows_of_sealed_shards_keeps_every_id_once(tmp_path):
    texts = list(TEXTS)
    manifest = _manifest(tmp_path / "m.parquet", texts)
    out = tmp_path / "out"
    assert qtts(manifest, out, "--output", "shar", "--shard-rows", 4).exit_code == 0
    texts[1], texts[6] = "Row 1, rewritten.", "Row 6, rewritten at more length."
    _manifest(tmp_path / "m.parquet", texts)
    r = qtts(manifest, out, "--output", "shar", "--shard-rows", 4)
    assert r.exit_code == 0 and "text (2)" in r.stderr, r.stderr
    got = shar(out)
    assert sorted(got) == IDS
    assert {i: t for i, (_, _, t) in got.items()} == dict(zip(IDS, texts, strict=True))
    assert len(list((out / "data").iterdir())) == 4 * 3  # three shards rewritten, one new
    again = qtts(manifest, out, "--output", "shar", "--shard-rows", 4)
    assert summary(again)["skipped"] == ROWS


def test_two_shard_tasks_share_one_data_folder(tmp_path):
    manifest = _manifest(tmp_path / "m.parquet")
    out = tmp_path / "out"
    tasks = [subprocess.Popen(qtts_cmd("batch", manifest, "--model", "fake-0.6b", "--speaker",
                                       "vivian", "-o", out, "-q", "--output", "shar",
                                       "--shard-rows", 2, "--num-shards", 2, "--shard-index", k),
                              env=fake_env(QTTS_FAKE_DELAY="0.02"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
             for k in range(2)]  # fmt: skip
    for task in tasks:
        assert task.wait(timeout=120) == 0, task.stderr.read()
    keys = sorted(p.name for p in (out / "data").glob("recording.*.tar"))
    assert {n.split("-of-")[0] for n in keys} == {"recording.shard-0", "recording.shard-1"}
    assert sorted(shar(out)) == IDS


def test_switches_into_and_out_of_shar_repack_without_the_model(made, tmp_path):
    manifest, files_out, _ = made
    out = tmp_path / "out"
    shutil.copytree(files_out, out)
    want = files(files_out)
    steps = [("--output", "shar"), ("--output", "webdataset"),
             ("--output", "shar", "--format", "flac"),
             ("--output", "files", "--format", "wav")]  # fmt: skip
    for step in steps:
        r = qtts(manifest, out, *step, "--shard-rows", 4, QTTS_FAKE_LOAD_FAIL="1")
        assert r.exit_code == 0, r.stderr
        s = summary(r)
        assert (s["repacked"], s["ok"], s["load_s"]) == (ROWS, 0, None)
        assert copies(out) == Counter(IDS) and litter(out) == []
        if "shar" in step:
            same(shar(out), want)  # flac decodes to the same samples
    assert sorted(files(out)) == IDS and list((out / "data").iterdir()) == []
    same(files(out), want)


SWITCHES = {
    "files->shar": ("files", ("--output", "shar")),
    "shar->files": ("shar", ("--output", "files")),
}
CASES = [
    ("files->shar", (f"{STORES}.repack_commit:_name", 1, "after")),  # a first shard named
    ("files->shar", (f"{STORES}.shard_files:_rename", 2, "after")),  # its key part not yet
    ("shar->files", (f"{STORES}.retract:_take_out", 2, "before")),  # one source shard gone
    # a shard's cuts gone
    ("shar->files", (f"{STORES}.archive:ArchiveFormat._rewrite_part", 2, "before")),
]


@pytest.mark.parametrize(("switch", "point"), CASES, ids=[f"{s}@{p[0]}.{p[1]}" for s, p in CASES])
def test_a_kill_during_a_switch_then_a_rerun_keeps_every_id_once(made, tmp_path, switch, point):
    manifest, files_out, shar_out = made
    source, extra = SWITCHES[switch]
    out = tmp_path / "out"
    shutil.copytree(files_out if source == "files" else shar_out, out)
    kill_at(point, manifest, out, *extra, "--shard-rows", 3, QTTS_FAKE_LOAD_FAIL="1")
    assert set(copies(out)) == set(IDS)  # nothing lost: each id in its old layout or its new
    r = qtts(manifest, out, *extra, "--shard-rows", 3, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0 and summary(r)["ok"] == 0, r.stderr
    assert copies(out) == Counter(IDS) and litter(out) == []
    same(shar(out) if source == "files" else files(out), files(files_out))


def test_score_reads_shar_members_as_it_reads_files(made, tmp_path):
    pytest.importorskip("speechmos")
    _, files_out, shar_out = made
    scores = {}
    for name, src in (("files", files_out), ("shar", shar_out)):
        out = tmp_path / name
        shutil.copytree(src, out)
        p = subprocess.run(qtts_cmd("score", out), capture_output=True, text=True,
                           env=fake_env(), timeout=300)  # fmt: skip
        assert p.returncode == 0, p.stderr
        table = pq.read_table(out / "scores.parquet", columns=["id", "dnsmos_ovrl"])
        scores[name] = dict(zip(*table.to_pydict().values(), strict=True))
    assert scores["shar"] == pytest.approx(scores["files"], abs=1e-3)
