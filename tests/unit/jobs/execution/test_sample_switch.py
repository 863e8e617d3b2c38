"""--greedy / --sample against a checkpoint's generation_config.json: --sample turns a greedy
site on (and into the fingerprint), a drawing flag on a site that takes the argmax is one warning
line naming it, and a row that runs to its budget under greedy retry says why it had one try."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from qtts.cli.job_options import sampling_options
from qtts.core.jobs.contract.spec import SamplingOverrides
from qtts.core.jobs.execution.generation import generation_options
from qtts.core.jobs.output.recorder import utterance_error
from qtts.core.jobs.work.fingerprint import job_fingerprint
from qtts.core.model.config import GenerationDefaults, SamplingParams
from qtts.core.synthesis.requests import Utterance

SAMPLED = GenerationDefaults()  # the official defaults: both sites sample
GREEDY = GenerationDefaults(  # a checkpoint whose generation_config.json samples nowhere
    talker=SamplingParams(do_sample=False, repetition_penalty=1.05),
    subtalker=SamplingParams(do_sample=False),
)


def _digest(options) -> str:
    return job_fingerprint(model="m", precision="float32", options=options, max_new_tokens=None,
                           audio_format="wav").digest  # fmt: skip


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_sample_turns_a_greedy_checkpoint_on_at_both_sites(caplog):
    options = generation_options(GREEDY, sampling_options(greedy=False))
    assert options.talker.do_sample and options.subtalker.do_sample
    assert options.attempts == 1 and _warnings(caplog) == []
    plain = generation_options(GREEDY, sampling_options())
    assert not plain.talker.do_sample and not plain.subtalker.do_sample
    assert _digest(options) != _digest(plain)  # a rerun with --sample redoes its rows


def test_sample_on_a_sampling_checkpoint_keeps_its_fingerprint():
    """--sample where the checkpoint samples anyway asks for nothing new: no row is redone."""
    given = generation_options(SAMPLED, sampling_options(greedy=False))
    assert _digest(given) == _digest(generation_options(SAMPLED, SamplingOverrides()))


def test_greedy_turns_both_sites_off():
    options = generation_options(SAMPLED, sampling_options(greedy=True))
    assert not options.talker.do_sample and not options.subtalker.do_sample


@pytest.mark.parametrize(
    ("defaults", "flags", "said"),
    [
        (GREEDY, {"temperature": 0.9}, "--temperature change(s) nothing"),
        (GREEDY, {"subtalker_top_p": 0.8}, "--subtalker-top-p change(s) nothing"),
        (SAMPLED, {"greedy": True, "top_k": 5}, "--top-k change(s) nothing"),
    ],
)
def test_a_drawing_flag_on_a_greedy_site_is_one_warning_naming_it(caplog, defaults, flags, said):
    generation_options(defaults, sampling_options(**flags))
    (line,) = _warnings(caplog)
    assert said in line
    if "greedy" in flags:
        assert line.startswith("--greedy takes the argmax: ") and "--sample" not in line
    else:
        assert "generation_config.json" in line and line.endswith("; --sample turns sampling on")


def test_one_line_for_every_idle_flag_and_none_for_a_sampling_site(caplog):
    half = GenerationDefaults(talker=SamplingParams(do_sample=False), subtalker=SamplingParams())
    flags = {"temperature": 0.7, "top_k": 5, "subtalker_temperature": 0.7}
    generation_options(half, sampling_options(**flags))
    (line,) = _warnings(caplog)
    assert "(generation_config.json do_sample: false): --temperature, --top-k change(s)" in line
    assert "subtalker" not in line  # the code predictor samples: its flag works
    caplog.clear()
    generation_options(SAMPLED, sampling_options(**flags, repetition_penalty=1.2))
    generation_options(GREEDY, sampling_options(repetition_penalty=1.2))  # applies to the argmax
    assert _warnings(caplog) == []


def _runaway(attempts: int) -> Utterance:
    audio = np.full(9 * 1920, 0.1, np.float32)
    return Utterance("r", np.zeros((9, 16), np.int64), audio, 24000, True, attempts=attempts)


def test_a_greedy_runaway_says_a_retry_would_repeat_it():
    """Greedy is what the options say (one try worth making), not guessed from the tries a row
    took: a sampled row that stopped after one try is not called greedy."""
    error = utterance_error(_runaway(1), 10, "retry/3", tries=1)
    assert "greedy decoding: a retry would repeat it" in error and "attempt" not in error
    tried = utterance_error(_runaway(3), 10, "retry/3", tries=3)
    assert "in 3 attempts" in tried and "greedy" not in tried
    sampled = utterance_error(_runaway(1), 10, "retry/3", tries=3)
    assert "in 1 attempt (" in sampled and "greedy" not in sampled
    assert "in 1 attempt (" in utterance_error(_runaway(1), 10, "retry/1")
