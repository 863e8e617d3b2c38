"""The digests a rerun compares with what earlier runs recorded, pinned to literal values.

Every out dir made so far holds these digests in its records (and the settings' in
.qtts/settings.json). A change to how one is computed (the JSON form, the hash, its length, a
key's name) makes every existing out dir look stale after an upgrade: each row is redone. If a
change here is meant, say so in the release notes; never update a pin to make this pass.
"""

from __future__ import annotations

import pyarrow as pa

from qtts.core.jobs.state.records import text_digests
from qtts.core.jobs.work.fingerprint import digest_of, job_fingerprint
from qtts.core.model.config import SamplingParams
from qtts.core.synthesis.requests import GenerationOptions

# One fixed job's settings digest, as its out dir records it for each row. Changing it makes
# every existing out dir look stale.
SETTINGS_DIGEST = "0869f4a7bf207769"
# "Hello, world." as the records hold its text digest. Changing it makes every row stale.
TEXT_DIGEST = -1751802141245545276

OPTIONS = GenerationOptions(
    talker=SamplingParams(
        do_sample=True, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05
    ),
    subtalker=SamplingParams(
        do_sample=False, temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.0
    ),
)
SETTINGS = {
    "model": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice:abc",
    "precision": "bfloat16",
    "talker": {"do_sample": True, "temperature": 0.9, "top_k": 50, "top_p": 1.0,
               "repetition_penalty": 1.05},
    "subtalker": {"do_sample": False, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
                  "repetition_penalty": 1.0},
    "max_new_tokens": 2048,
    "format": "flac",
}  # fmt: skip


def test_a_fixed_jobs_settings_digest_is_what_earlier_runs_recorded():
    fingerprint = job_fingerprint(
        model=SETTINGS["model"],
        precision="bfloat16",
        options=OPTIONS,
        max_new_tokens=2048,
        audio_format="flac",
    )
    assert fingerprint.values == SETTINGS
    assert fingerprint.digest == SETTINGS_DIGEST


def test_the_settings_digest_does_not_hang_on_key_order():
    """The registry is read back from JSON: its key order is not the order it was made in."""
    assert digest_of(dict(reversed(SETTINGS.items()))) == SETTINGS_DIGEST


def test_a_texts_digest_is_what_earlier_runs_recorded():
    assert text_digests(pa.array(["Hello, world.", None])).to_pylist() == [TEXT_DIGEST, None]
