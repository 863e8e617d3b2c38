"""Stand-ins for modules the peers import at the top but the benchmark runs never need, for the
GPU image that lacks them (and should not carry librosa's numba and llvmlite for it).

- librosa: `filters.mel` (the speaker encoder's Slaney filterbank: qtts's own numpy copy of
  librosa's, which tests/unit/tools/test_peers_bench.py ties to librosa), `load` (16-bit PCM WAV
  only, the reference clip) and `resample` (only to the same rate: the clip is 24 kHz already).
- sox, torchaudio: empty modules; only the 25 Hz tokenizer's code uses them.

Each stand-in is installed only where the real module does not import. Imports nothing heavy.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

INSTALLED: list[str] = []  # what install() stood in for (a run's notes name them)


class _StandIns:
    """Meta-path finder serving the stand-ins as real modules with specs (transformers probes
    packages with importlib.util.find_spec, which refuses a module whose __spec__ is None):
    librosa and librosa.filters with the functions below, anything under sox or torchaudio
    empty (`import torchaudio.compliance.kaldi` works)."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".", 1)[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        if module.__name__ == "librosa":
            module.load, module.resample, module.__version__ = load, resample, "0+stand-in"
        elif module.__name__ == "librosa.filters":
            module.mel = mel


def mel(*, sr, n_fft, n_mels=128, fmin=0.0, fmax=None, htk=False, norm="slaney", dtype=None):
    """librosa.filters.mel for the Slaney case the speaker encoder uses: float32 [n_mels, F]."""
    from qtts.core.model.speaker_encoder import slaney_mel_filterbank

    if htk or norm != "slaney":
        raise NotImplementedError("the librosa stand-in knows the Slaney mel filterbank only")
    fmax = sr / 2.0 if fmax is None else fmax
    return slaney_mel_filterbank(int(sr), int(n_fft), int(n_mels), float(fmin), float(fmax)).copy()


def load(path, sr=None, mono=True, **_):
    """librosa.load for a 16-bit PCM WAV at its own rate (sr=None), mixed to mono."""
    from peers.common import read_wav

    audio, rate = read_wav(path)
    if sr is not None and sr != rate:
        raise NotImplementedError(f"the librosa stand-in does not resample ({rate} -> {sr} Hz)")
    return audio, rate


def resample(y, *, orig_sr, target_sr, **_):
    if int(orig_sr) != int(target_sr):
        raise NotImplementedError("the librosa stand-in does not resample; write a 24 kHz clip")
    return y


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except Exception:  # missing, or broken against this image's other packages
        return False
    return True


def install(force: bool = False) -> list[str]:
    """Stand in for librosa, sox and torchaudio where they do not import (all three with
    `force`: a CPU check of the stand-ins in the peers' own code paths); returns their names."""
    names = tuple(n for n in ("librosa", "sox", "torchaudio") if force or not _importable(n))
    if names:
        for loaded in [m for m in sys.modules if m.split(".", 1)[0] in names]:
            del sys.modules[loaded]
        sys.meta_path.insert(0, _StandIns(names))
        INSTALLED.extend(names)
    return list(INSTALLED)
