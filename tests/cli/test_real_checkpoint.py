"""The CLI on a real (tiny, random) checkpoint: end to end, and checkpoint errors as one line."""

import json
import os
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import soundfile as sf
from safetensors.torch import load_file, save_file


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", seed=5, greedy=True)


def qtts(*args, stdin: bytes | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("QTTS_")}
    return subprocess.run([sys.executable, "-m", "qtts", *map(str, args)], input=stdin,
                          capture_output=True, env=env, timeout=300)  # fmt: skip


def _one_line_error(proc, *needles: str):
    err = proc.stderr.decode()
    lines = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_synth_writes_files_codes_and_results(checkpoint, tmp_path):
    out = tmp_path / "out"
    text = b"Hello there.\n\nSecond line here.\n"
    proc = qtts("synth", "-", "--model", checkpoint, "--speaker", "vivian", "--device", "cpu",
                "--max-new-tokens", "9", "--save-codes", "--out-dir", out, stdin=text)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert summary["ok"] == 2
    audio, sr = sf.read(out / "000003.wav")
    assert sr == 24000 and len(audio) == 8 * 1920  # 9 talker steps -> 8 frames
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert {r["id"] for r in results} == {"000001", "000003"}
    assert all(r["status"] == "ok" and r["num_frames"] == 8 for r in results)
    plan = [line for line in proc.stderr.decode().splitlines() if "memory plan:" in line]
    assert len(plan) == 1 and "2 slots" in plan[0]  # --batch-size auto: both rows at once


def test_info_lists_speakers_and_languages(checkpoint):
    proc = qtts("info", checkpoint, "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    info = json.loads(proc.stdout)
    blob = json.dumps(info)
    assert "vivian" in blob and "english" in blob and "auto" in blob


def _broken_copy(checkpoint, tmp_path, mutate):
    bad = tmp_path / "bad"
    shutil.copytree(checkpoint, bad)
    mutate(bad)
    return bad


@pytest.mark.parametrize(
    "case, needles",
    [
        ("missing_tensor", ["talker.codec_head.weight"]),
        ("unexpected_tensor", ["talker.extra.weight"]),
        ("wrong_shape", ["talker.model.norm.weight"]),
        ("no_speech_tokenizer", ["speech_tokenizer"]),
    ],
)
def test_checkpoint_errors_are_one_line_exit_1(checkpoint, tmp_path, case, needles):
    def mutate(d):
        if case == "no_speech_tokenizer":
            shutil.rmtree(d / "speech_tokenizer")
            return
        weights = load_file(d / "model.safetensors")
        if case == "missing_tensor":
            del weights["talker.codec_head.weight"]
        elif case == "unexpected_tensor":
            weights["talker.extra.weight"] = weights["talker.model.norm.weight"].clone()
        else:
            weights["talker.model.norm.weight"] = weights["talker.model.norm.weight"][:-1].clone()
        save_file(weights, d / "model.safetensors")

    bad = _broken_copy(checkpoint, tmp_path, mutate)
    proc = qtts("synth", "-", "--model", bad, "--speaker", "vivian", "--device", "cpu",
                "--out-dir", tmp_path / "out", stdin=b"Hello.\n")  # fmt: skip
    assert proc.returncode == 1
    _one_line_error(proc, *needles)


def test_unknown_speaker_fails_the_row_with_the_list(checkpoint, tmp_path, write_manifest):
    path = write_manifest([
        {"id": "a", "text": "Hello.", "speaker": "nobody"},
        {"id": "b", "text": "Hello.", "speaker": "ryan"},
    ])  # fmt: skip
    out = tmp_path / "out"
    proc = qtts("batch", path, "--model", checkpoint, "--device", "cpu", "--max-new-tokens", "5",
                "--out-dir", out)  # fmt: skip
    assert proc.returncode == 3, proc.stderr.decode()
    rows = {r["id"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}
    assert rows["b"]["status"] == "ok"
    assert rows["a"]["status"] == "failed"
    assert "nobody" in rows["a"]["error"] and "vivian" in rows["a"]["error"]


def test_sample_makes_a_greedy_checkpoint_sample(checkpoint, tmp_path, write_manifest):
    """The fixture's generation_config.json samples nowhere: two seeds give the same codes, and
    --temperature alone changes nothing, said in one warning line; --sample draws by seed."""
    import numpy as np

    path = write_manifest([{"id": f"s{seed}", "text": "Hello.", "seed": seed} for seed in (1, 2)])

    def codes(out, *flags):
        proc = qtts("batch", path, "--model", checkpoint, "--speaker", "vivian", "--device", "cpu",
                    "--max-new-tokens", "8", "--save-codes", "--out-dir", out, *flags)  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        return proc.stderr.decode(), [np.load(out / f"s{seed}.codes.npy") for seed in (1, 2)]

    err, (one, two) = codes(tmp_path / "greedy", "--temperature", "0.9")
    assert np.array_equal(one, two)
    idle = [line for line in err.splitlines() if "change(s) nothing" in line]
    assert len(idle) == 1 and "--temperature" in idle[0] and "--sample" in idle[0], err
    err, (one, two) = codes(tmp_path / "sampled", "--sample", "--temperature", "0.9")
    assert not np.array_equal(one, two) and "change(s) nothing" not in err
