"""Oracle-venv plumbing shared by the golden-fixture scripts.

Owns: the torchaudio import stub, loading qtts's tiny tokenizer module by file path, weight
re-drawing, dtype rounding and writing safetensors/json files.

Must not know: any qtts package import (this runs in /work/oracle, where qtts is not installed),
checkpoint dimensions or cases.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "golden"


class _TorchaudioStub:
    """Meta-path finder that satisfies `import torchaudio` (only the 25 Hz tokenizer uses it)."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchaudio" or name.startswith("torchaudio."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


def install_torchaudio_stub() -> None:
    try:
        import torchaudio  # noqa: F401
    except Exception:
        sys.meta_path.insert(0, _TorchaudioStub())


def load_tiny_tokenizer_module():
    """Import core/tiny/tokenizer.py by path (qtts is not installed in the oracle venv)."""
    path = REPO / "core" / "tiny" / "tokenizer.py"
    spec = importlib.util.spec_from_file_location("qtts_tiny_tokenizer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_json(path: Path, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def redraw_(module, seed: int, std: float = 0.1) -> None:
    """Re-draw every parameter: norms/scales ~ 1 + std*noise, everything else std*noise.

    The official init is near zero (dull, near-constant tokens); this gives varied greedy codes.
    Parameters are visited in name order so a seed always gives the same weights.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            is_scale = "norm" in name and leaf == "weight" and p.dim() == 1
            if is_scale or leaf in ("gamma", "scale"):
                p.copy_(1.0 + std * noise)
            else:
                p.copy_(std * noise)


def state_dict_as(module, dtype) -> dict:
    """Contiguous state dict (parameters + persistent buffers) cast to the storage dtype."""
    out = {}
    for key, value in module.state_dict().items():
        if "inv_freq" in key:
            continue  # RoPE tables are rebuilt on load, never stored
        t = value.detach().contiguous()
        out[key] = t.to(dtype) if t.is_floating_point() else t
    return out


def round_through_(module, dtype) -> None:
    """Round float parameters through `dtype` so in-memory weights equal what gets stored."""
    import torch

    with torch.no_grad():
        for p in module.parameters():
            if p.is_floating_point():
                p.copy_(p.to(dtype).to(p.dtype))


def save_weights(module, path: Path, dtype) -> None:
    from safetensors.torch import save_file

    save_file(state_dict_as(module, dtype), str(path), metadata={"format": "pt"})
    path.chmod(0o644)  # safetensors writes 0600; fixtures are plain repo files
