"""Teacher forcing for the tests: the engine's sampling sites forced to reference tokens, their
logits recorded and compared (qtts.core.doctor.teacher_forcing, which `qtts doctor` also runs)."""

from __future__ import annotations

import torch

from qtts.core.doctor import teacher_forcing
from qtts.core.doctor.teacher_forcing import Logits, agreement

__all__ = ["Logits", "agreement", "forced_logits"]


def forced_logits(eng, prompts, codes: list[torch.Tensor], monkeypatch=None) -> Logits:
    """teacher_forcing.forced_logits; `monkeypatch` is accepted for the tests' old signature (the
    library swaps and restores the sampler itself)."""
    return teacher_forcing.forced_logits(eng, prompts, codes)
