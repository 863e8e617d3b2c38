"""The finishing steps in a row's fingerprint: each step that acts changes the digest (a rerun with
another rate, loudness or trim redoes its rows, and says which), and with none of them the digest
is the one qtts computed before they existed, so no out dir made then is redone."""

from __future__ import annotations

import pytest

from qtts.core.jobs.contract.spec import FinishOptions
from qtts.core.jobs.work.fingerprint import job_fingerprint, setting_changes
from qtts.core.model.config import GenerationDefaults
from qtts.core.synthesis.requests import GenerationOptions

DEFAULTS = GenerationDefaults()
# Digests of these settings as qtts computed them before the finishing options existed: an out
# dir made then must find its rows done.
BEFORE = {("wav", None): "11620e6c2c526ea5", ("flac", 300): "60d933ad69d995b8"}


def fingerprint(audio_format="wav", max_new_tokens=None, finish=None):
    options = GenerationOptions(DEFAULTS.talker, DEFAULTS.subtalker)
    extra = {} if finish is None else {"finish": finish}
    return job_fingerprint(model="m", precision="cpu:float32", options=options,
                           max_new_tokens=max_new_tokens, audio_format=audio_format,
                           **extra)  # fmt: skip


@pytest.mark.parametrize("audio_format, max_new_tokens", BEFORE)
def test_a_job_without_the_new_options_keeps_its_digest(audio_format, max_new_tokens):
    for finish in (None, FinishOptions(), FinishOptions(sample_rate=24_000).at_model_rate(24_000)):
        got = fingerprint(audio_format, max_new_tokens, finish)
        assert got.digest == BEFORE[audio_format, max_new_tokens]


STEPS = {
    "rate": FinishOptions(sample_rate=16_000),
    "other rate": FinishOptions(sample_rate=22_050),
    "loudness": FinishOptions(loudness_lufs=-23.0),
    "other loudness": FinishOptions(loudness_lufs=-16.0),
    "other ceiling": FinishOptions(loudness_lufs=-23.0, peak_db=-2.0),
    "trim": FinishOptions(trim_silence=True),
    "other pad": FinishOptions(trim_silence=True, trim_pad_s=0.2),
    "other threshold": FinishOptions(trim_silence=True, trim_threshold_db=-30.0),
}


def test_each_step_that_acts_changes_the_digest():
    digests = {name: fingerprint(finish=f).digest for name, f in STEPS.items()}
    assert len(set(digests.values()) | {BEFORE["wav", None]}) == len(STEPS) + 1


def test_a_changed_step_is_named_in_the_rerun_reason():
    old, new = fingerprint().values, fingerprint(finish=STEPS["rate"]).values
    assert setting_changes(old, new) == "sample_rate off -> 16000"
    assert setting_changes(new, fingerprint(finish=STEPS["other rate"]).values) == (
        "sample_rate 16000 -> 22050"
    )
    loud = fingerprint(finish=STEPS["loudness"]).values
    assert setting_changes(old, loud) == "loudness.lufs off -> -23.0, loudness.peak_db off -> -1.0"
    louder = fingerprint(finish=STEPS["other loudness"]).values
    assert setting_changes(loud, louder) == "loudness.lufs -23.0 -> -16.0"
    trimmed = fingerprint(finish=STEPS["trim"]).values
    assert setting_changes(trimmed, old) == (
        "trim_silence.pad_s 0.1 -> off, trim_silence.threshold_db -40.0 -> off"
    )
