"""tools/peers_bench.py's CPU pieces: the librosa stand-in's mel filterbank against librosa, the
clip and WAV helpers, each system's frame budget, the KV bound, the signature binder, the EOS row
the driver zeroes, the schedule and its time limits, qtts's warm-up on one load, the table, and
the dry run's listing (no peer installed, no model)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools"))

from peers import checks, common, driver, qtts_run, report, stubs  # noqa: E402


def _bench():
    spec = importlib.util.spec_from_file_location("peers_bench", REPO / "tools" / "peers_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_mel_stand_in_is_librosas():
    librosa = pytest.importorskip("librosa")
    kw = {"sr": 24000, "n_fft": 1024, "n_mels": 128, "fmin": 0, "fmax": 12000}
    ours = stubs.mel(**kw)
    assert ours.dtype == np.float32 and ours.shape == (128, 513)
    np.testing.assert_allclose(ours, librosa.filters.mel(**kw), rtol=1e-6, atol=1e-9)


def test_stand_ins_are_modules_with_specs(monkeypatch):
    """transformers probes packages with find_spec, which refuses a module without a spec."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in [m for m in sys.modules if m.split(".")[0] in ("librosa", "sox", "torchaudio")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(stubs, "INSTALLED", [])
    assert stubs.install(force=True) == ["librosa", "sox", "torchaudio"]
    import librosa.filters
    import torchaudio.compliance.kaldi  # noqa: F401

    assert importlib.util.find_spec("librosa") is not None
    assert librosa.filters.mel is stubs.mel and librosa.load is stubs.load
    with pytest.raises(NotImplementedError):
        librosa.resample(np.zeros(4), orig_sr=16000, target_sr=24000)


def test_reference_clip_and_wavs_round_trip(tmp_path):
    ref = common.write_reference(tmp_path / "ref.wav")
    audio, rate = stubs.load(ref, sr=None)
    assert rate == 24000 and audio.shape == (72000,) and 0.05 < np.abs(audio).max() <= 1
    common.write_wav(tmp_path / "r0001.wav", np.zeros(3 * 1920 + 7))
    assert common.wav_frames(tmp_path) == {"r0001": 3, "ref": 37}
    rows = common.make_rows(3)
    made, per_row, seconds = common.collect(tmp_path, rows, 3)
    assert (made, per_row, seconds) == (3, [0, 3], 0.24)  # r0000 and r0002 wrote no WAV


def test_every_system_gets_the_same_frames():
    """Official and qtts: N - 1 frames for max_new_tokens N; faster-*: N."""
    assert [common.max_new_tokens(s, 128) for s in ("official", "qtts")] == [129, 129]
    assert [common.max_new_tokens(s, 128) for s in ("faster", "faster_batch")] == [128, 128]


def test_kv_bound_holds_prompt_and_frames():
    rows = common.make_rows(8)
    bound = common.seq_len_bound(rows, 128)
    assert bound % 64 == 0 and bound >= max(len(r.text.encode()) for r in rows) + 128 + 16


def test_rows_file_is_a_qtts_manifest(tmp_path):
    rows = common.make_rows(5)
    path = common.write_rows(rows, tmp_path / "rows.jsonl")
    assert common.read_rows(path) == rows and common.read_rows(path, 2) == rows[:2]
    assert {json.loads(line)["speaker"] for line in path.read_text().splitlines()} <= set(
        common.SPEAKERS
    )


def _two_arity(self, key_states, value_states): ...


def _one_arity(self, key_states): ...


def _kw(self, text, language=None, **kwargs): ...


def test_the_binder_names_what_does_not_fit(monkeypatch):
    fake = type(sys)("fake_peer")
    fake.two, fake.one, fake.kw = _two_arity, _one_arity, _kw
    monkeypatch.setitem(sys.modules, "fake_peer", fake)
    assert checks.bind("fake_peer", "one", ["key_states"]) == "ok"
    assert "also requires ['value_states']" in checks.bind("fake_peer", "two", ["key_states"])
    assert checks.bind("fake_peer", "kw", ["text", "max_new_tokens"]) == (
        "ok (max_new_tokens through **kwargs)"
    )
    assert "takes no ['speaker']" in checks.bind("fake_peer", "one", ["key_states", "speaker"])


def test_never_stop_zeroes_only_the_eos_row(tmp_path):
    from safetensors.torch import load_file, save_file

    (tmp_path / "config.json").write_text(json.dumps({"talker_config": {"codec_eos_token_id": 5}}))
    head = torch.randn(8, 4)
    save_file({"talker.codec_head.weight": head.clone(), "x": torch.ones(2)},
              tmp_path / "model.safetensors")  # fmt: skip
    driver.never_stop(tmp_path)
    got = load_file(tmp_path / "model.safetensors")
    assert got["talker.codec_head.weight"][5].abs().sum() == 0
    keep = [i for i in range(8) if i != 5]
    assert torch.equal(got["talker.codec_head.weight"][keep], head[keep])
    assert torch.equal(got["x"], torch.ones(2))


def _result(system, kind, rate, warmup=0.0):
    wall = 5.12 / rate
    return {
        "system": system,
        "kind": kind,
        "rows": 4,
        "batch": 4,
        "frames_per_row": [16, 16],
        "audio_s": 5.12,
        "wall_s": wall,
        "warmup_s": warmup,
        "load_s": 1.0,
        "audio_s_per_s": 5.12 / (wall + warmup),
        "after_warmup_audio_s_per_s": rate,
    }


def test_table_gives_qtts_ratio_per_kind_with_and_without_warmup():
    results = [
        _result("qtts", "base", 10.0),
        _result("official", "base", 2.5, warmup=2.048),
        _result("qtts", "custom_voice", 8.0),
        _result("official", "custom_voice", 4.0),
        {"system": "faster", "kind": "base", "error": "timeout after 150 s"},
    ]
    lines = report.table(results)
    official = lines[3].split(" | ")
    assert (official[9], official[11]) == ("8.00", "4.00")  # warmup billed, then left out
    assert lines[5].split(" | ")[9] == "2.00"
    assert "failed: 'timeout after 150 s'" in lines[6]
    result = common.RunResult(
        "faster",
        "base",
        1,
        1,
        16,
        16,
        [16, 16],
        audio_s=10.0,
        wall_s=4.0,
        load_s=3.0,
        warmup_s=1.0,
        device="cpu",
        dtype="float32",
        versions={},
    )
    assert (result.audio_s_per_s, result.after_warmup_audio_s_per_s) == (2.0, 2.5)


def test_the_table_says_what_each_figure_holds(tmp_path, capsys):
    setup = {"size": "tiny", "dtype": "float32", "frames": 16, "device": "cpu", "total_s": 9.0,
             "qtts_warmup": "16-row x 16-frame"}  # fmt: skip
    report.write(tmp_path, [_result("qtts", "base", 10.0, warmup=3.0)], setup)
    text = (tmp_path / "peers.txt").read_text()
    head, legend, columns = text.splitlines()[:3]
    assert "whole driver 9.0 s" in head
    assert "qtts a 16-row x 16-frame qtts batch job" in legend
    assert "warmup()" in legend and "3-token call" in legend  # the peers' warmups
    assert "with warmup = audio s / (warmup s + wall s)" in legend
    assert "after warmup = audio s / wall s" in legend
    assert "audio-s/s with warmup" in columns and "audio-s/s after warmup" in columns
    assert json.loads((tmp_path / "peers.json").read_text())["setup"] == setup
    capsys.readouterr()


def test_dry_run_lists_every_run(tmp_path, capsys):
    args = _bench().parse_args(["all", "--out", str(tmp_path), "--work", str(tmp_path / "w"),
                                "--rows", "16", "--frames", "32"])  # fmt: skip
    todo = driver.plan(args)
    assert todo == driver.PLAN
    report.dry_run(args, todo, driver.run_command, driver.batches)
    text = capsys.readouterr().out
    assert "max_new_tokens=33" in text and "--max-new-tokens 33" in text  # official, qtts
    assert "max_new_tokens=32" in text  # faster-*
    assert "--batch 16" in text and "--batch 4," not in text  # faster-qwen3-tts-batch: one batch
    assert driver.batches(args, "faster") == (3, [1])
    assert driver.batches(args, "official") == (16, [16])
    # qtts: an untimed warm-up job (16 rows x 16 frames, a copy of the clip), then the rows
    assert "warm-up (untimed): qtts batch 'WARMUP_ROWS(16)'" in text
    assert "--max-new-tokens 17" in text and "--ref-audio COPY_OF_REF" in text
    assert "then, the same loaded model: qtts batch" in text
    args = _bench().parse_args(["all", "--out", str(tmp_path), "--batch-sizes", "32,128"])
    assert driver.batches(args, "faster_batch") == (128, [32, 128])


def test_every_base_system_runs_first_each_within_its_limit():
    args = _bench().parse_args(["all", "--out", "/tmp/x", "--budget", "235"])
    todo = driver.plan(args)
    assert [s for s, k in todo if k == "base"] == ["qtts", "faster_batch", "faster", "official"]
    assert all(k == "custom_voice" for _, k in todo[4:])
    limit = driver.limits(args)
    assert limit == {"qtts": 65, "faster_batch": 50, "faster": 40, "official": 55}
    lines = driver.schedule(args, todo)
    assert lines[1] == (
        "  qtts base: a 16-row x 16-frame warm-up job, then 128 rows, batch auto, limit 65 s"
    )
    assert lines[2] == "  faster_batch base: 128 rows, batch 128, limit 50 s"
    assert lines[3] == "  faster base: 3 rows, batch 1, limit 40 s"
    assert lines[4] == "  official base: 128 rows, batch 128, limit 55 s"
    assert "only in what the Base runs leave" in lines[5]
    assert "Base runs 210 s of limits in the 235 s budget" in lines[-1]
    assert "DOES NOT FIT" not in lines[-1]
    # A Base run may use what is left beyond the later Base runs' limits: after a setup of 25 s
    # qtts gets its 65, and if it then took 45 s faster_batch gets its 50 + the 20 qtts left.
    assert driver.run_limit(args, todo, 0, limit, 210) == 65
    assert driver.run_limit(args, todo, 1, limit, 165) == 70
    assert driver.run_limit(args, todo, 3, limit, 61) == 61  # the last Base run: all that is left
    assert driver.run_limit(args, todo, 4, limit, 300) == 65  # CustomVoice: its limit if left,
    assert driver.run_limit(args, todo, 4, limit, 64) == 0  # else it does not run
    assert driver.run_limit(args, todo, 2, limit, None) == 40  # no --budget: its limit
    args = _bench().parse_args(["all", "--out", "/tmp/x", "--time-limits", "qtts=90",
                                "--time-limit", "30", "--budget", "100"])  # fmt: skip
    assert driver.limits(args) == {"qtts": 90, "official": 30, "faster": 30, "faster_batch": 30}
    assert "DOES NOT FIT" in driver.schedule(args, driver.plan(args))[-1]
    args.time_limits = "qtts:90"
    with pytest.raises(SystemExit, match="SYSTEM=SECONDS"):
        driver.limits(args)


def test_qtts_warms_up_and_runs_on_one_load(tmp_path, monkeypatch):
    """Two `qtts batch` commands in one process: the hook loads once and hands the second
    command the same synthesizer; warmup and wall are each timed from its return."""
    from qtts.cli import app
    from qtts.core.synthesis import session

    loads = []

    def fake_load(text_model, placement):
        loads.append(placement)
        return object()

    def fake_main():
        argv = sys.argv[1:]
        model = type("Text", (), {"model_dir": Path(argv[argv.index("--model") + 1])})()
        synth = qtts_run.load_synthesizer(model, "cpu:float32")
        print(json.dumps({"out": argv[argv.index("--out-dir") + 1], "synth": id(synth)}))
        raise SystemExit(0)

    monkeypatch.setattr(session, "load_synthesizer", fake_load)
    monkeypatch.setattr(app, "main", fake_main)
    monkeypatch.setattr(qtts_run, "_SYNTHS", {})
    monkeypatch.setattr(qtts_run, "LOADED", {})
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.delenv("QTTS_FAKE_SYNTH", raising=False)
    ckpt, ref = tmp_path / "ckpt", tmp_path / "ref.wav"
    warm = qtts_run.command(tmp_path / "w.jsonl", ckpt, "base", ref, 16, tmp_path / "w", "cpu")
    real = qtts_run.command(tmp_path / "r.jsonl", ckpt, "base", ref, 128, tmp_path / "r", "cpu")
    timed = qtts_run.warm_then_run(warm, real)
    assert len(loads) == 1
    assert timed["warmup_summary"]["out"] == str(tmp_path / "w")
    assert timed["summary"]["out"] == str(tmp_path / "r")
    assert timed["warmup_summary"]["synth"] == timed["summary"]["synth"]
    assert timed["load_s"] >= 0 and timed["warmup_s"] >= 0 and timed["wall_s"] >= 0
    assert "--max-new-tokens" in warm and warm[warm.index("--max-new-tokens") + 1] == "17"
    assert qtts_run.warmup_shape(128, 128) == (16, 16)
    assert qtts_run.warmup_shape(8, 4) == (8, 4)


def test_a_hung_run_is_killed_at_its_limit_and_keeps_what_it_printed(tmp_path, monkeypatch):
    script = tmp_path / "hang.py"
    script.write_text(
        "import json, time\n"
        "print('{not json')\n"
        "print(json.dumps({'system': 'faster_batch', 'batch': 32}), flush=True)\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(driver, "ENTRY", script)
    args = _bench().parse_args(["all", "--out", str(tmp_path), "--python-tf4", sys.executable])
    lines = driver.run_system(args, "faster_batch", "base", [], tmp_path / "log", limit=3)
    assert lines[0]["error"] == "timeout after 3 s"
    assert lines[0]["finished_batches"] == [{"system": "faster_batch", "batch": 32}]
