"""A row whose prompt plus frame budget runs past the talker's trained positions fails alone, with
its reason, before any engine state is sized for it; the other rows are synthesized."""

import tempfile
from dataclasses import replace
from pathlib import Path

from qtts.core.synthesis.requests import GenerationOptions, Request, RowFailure, Utterance


def test_rows_past_the_model_positions_fail_alone():
    from qtts.core.synthesis.prompt import prompt_length, prompt_tokens
    from qtts.core.synthesis.requests import Placement
    from qtts.core.synthesis.session import load_synthesizer, open_text_model
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    ck = make_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", seed=4)
    text_model = open_text_model(str(ck))
    synth = load_synthesizer(text_model, Placement(device="cpu", dtype="float32", batch_size=2))
    prompt = prompt_length(prompt_tokens(synth.config, text_model.tokenizer, "Hi there.",
                                         "vivian", "english", None))  # fmt: skip
    limit = prompt + 6
    synth.config = replace(synth.config, talker=replace(synth.config.talker,
                                                        max_position_embeddings=limit))  # fmt: skip
    requests = [Request("fits", "Hi there.", 1, "vivian", "english", max_new_tokens=6),
                Request("over", "Hi there.", 2, "vivian", "english", max_new_tokens=7)]  # fmt: skip
    d = text_model.defaults
    out = {
        item.id: item
        for item in synth.synthesize(requests, GenerationOptions(d.talker, d.subtalker))
    }
    assert isinstance(out["fits"], Utterance)
    assert isinstance(out["over"], RowFailure)
    assert f"exceeds the model's {limit} positions" in out["over"].error
