"""Dev check: qtts's speech decoder vs the official one on a tiny random speech tokenizer.

Run in the oracle venv (it has the official `qwen_tts`; qtts is imported from this checkout):
    /work/oracle/bin/python tools/oracle/check_codec.py [--fixture tests/fixtures/golden]

Builds the official `Qwen3TTSTokenizerV2Decoder` with tiny dims (real upsample rates, 16 codebooks
of 2048), re-draws its weights, loads them strictly into `qtts.core.model.codec.SpeechDecoder`, and
compares on random codes: single forwards, and the official list decode (the wrapper's
`Qwen3TTSTokenizer.decode` -> `Qwen3TTSTokenizerV2Model.decode`, run unbound on a shim so no
Mimi encoder is needed) against `decode_utterances`, for lengths up to > 600 frames and batched
lists of mixed lengths. With --fixture it also loads the committed tiny speech tokenizer through
the official `Qwen3TTSTokenizer.from_pretrained` and compares on its weights. Prints max |err|
per case and exits 1 if any exceeds TOL.
"""

import argparse
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
TOL = 1e-5


class _StubTorchaudio(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torchaudio has no wheel for this torch; only the 25 Hz tokenizer imports it."""

    def find_spec(self, name, path, target=None):
        if name == "torchaudio" or name.startswith("torchaudio."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


def _alias_qtts() -> None:
    """Import qtts.core.* from this checkout without installing it in the oracle venv."""
    for name, folder in (("qtts", "pkg"), ("qtts.core", "core")):
        mod = types.ModuleType(name)
        mod.__path__ = [str(REPO / folder)]
        sys.modules[name] = mod


sys.meta_path.insert(0, _StubTorchaudio())
_alias_qtts()

from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    Qwen3TTSTokenizerV2DecoderConfig,
)
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    Qwen3TTSTokenizerV2Decoder,
    Qwen3TTSTokenizerV2Model,
)
from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer  # noqa: E402

from qtts.core.model.codec import SpeechDecoder, SpeechDecoderConfig, decode_utterances  # noqa: E402


def tiny_config(kv_heads: int, theta: float) -> dict:
    """A whole speech_tokenizer/config.json dict (decoder part only matters here)."""
    return {
        "model_type": "qwen3_tts_tokenizer_12hz",
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "decoder_config": {
            "codebook_size": 2048,
            "codebook_dim": 32,
            "hidden_size": 32,
            "latent_dim": 24,
            "head_dim": 16,  # q width 64 != hidden 32, like the real 16 x 64 vs 512
            "num_attention_heads": 4,
            "num_key_value_heads": kv_heads,
            "intermediate_size": 48,
            "num_hidden_layers": 2,
            "rope_theta": theta,
            "sliding_window": 72,
            "rms_norm_eps": 1e-5,
            "num_quantizers": 16,
            "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2],
            "decoder_dim": 32,
            "hidden_act": "silu",
        },
    }


DECODER_LAST = "decoder.6."


def redraw(model: torch.nn.Module, seed: int) -> None:
    """Weights with fan-in scaling so audio is lively but mostly not clamped."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("cluster_usage"):
                p.copy_(torch.rand(p.shape, generator=gen) * 2 + 0.1)
                p[::97] = 1e-8  # exercise the usage clamp (1e-5) ...
            elif name.endswith("embedding_sum"):
                p.copy_(noise * 0.1)
                p[::97] *= 1e-5  # ... on rows kept small so the clamped entry stays sane
            elif name.startswith("decoder.") and p.dim() >= 2:
                gain = 3.0 if name.startswith(DECODER_LAST) else 0.55
                p.copy_(gain * noise / (p[0].numel() ** 0.5))
            elif p.dim() >= 2:
                p.copy_(noise / (p[0].numel() ** 0.5))
            elif name.endswith(("scale", "gamma")):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(("alpha", "beta")):
                p.copy_(0.3 * noise)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            else:
                p.copy_(0.05 * noise)


def official_list_decode(official: torch.nn.Module, codes: list[torch.Tensor]) -> list:
    """The official wrapper path, with the model replaced by a shim around the decoder."""
    shim_model = types.SimpleNamespace(
        decoder=official,
        decode_upsample_rate=1920,
        config=types.SimpleNamespace(return_dict=True),
    )
    shim_model.decode = lambda c, return_dict=None: Qwen3TTSTokenizerV2Model.decode(
        shim_model, c, return_dict
    )
    shim_model.get_model_type = lambda: "qwen3_tts_tokenizer_12hz"
    shim_model.get_output_sample_rate = lambda: 24000
    wrapper = types.SimpleNamespace(model=shim_model, device=torch.device("cpu"))
    wavs, _ = Qwen3TTSTokenizer.decode(wrapper, [{"audio_codes": c} for c in codes])
    return [torch.from_numpy(w) for w in wavs]


def compare(label: str, ours: list, theirs: list) -> float:
    worst = 0.0
    for a, b in zip(ours, theirs, strict=True):
        if a.shape != b.shape:
            print(f"FAIL {label}: shape {tuple(a.shape)} vs official {tuple(b.shape)}")
            return float("inf")
        if a.numel():
            worst = max(worst, (a.float() - b.float()).abs().max().item())
    rms = max((float(b.float().pow(2).mean().sqrt()) for b in theirs if b.numel()), default=0.0)
    print(
        f"{'ok  ' if worst <= TOL else 'FAIL'} {label}: max|err| {worst:.2e} (audio rms {rms:.3f})"
    )
    return worst


def random_codes(gen: torch.Generator, frames: int) -> torch.Tensor:
    return torch.randint(0, 2048, (frames, 16), generator=gen)  # [T, Q]


def check_pair(official, ours, seed: int, label: str) -> float:
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    with torch.inference_mode():
        for frames in (1, 7, 80):  # plain forward, no chunking
            c = random_codes(gen, frames).T[None]  # [1, Q, T]
            ref = official(c).squeeze(1)
            worst = max(worst, compare(f"{label} forward T={frames}", [ours(c)], [ref]))
        for lengths in ([700], [301], [325, 326], [700, 350, 40], [40, 350, 700, 1], [600, 601]):
            codes = [random_codes(gen, n) for n in lengths]
            ref = official_list_decode(official, codes)
            got = decode_utterances(ours, codes)
            worst = max(worst, compare(f"{label} list {lengths}", got, ref))
        # batch == single (official): the 350-frame row alone vs inside the batch above
        alone = official_list_decode(official, codes[1:2])
        worst = max(worst, compare(f"{label} official batch vs single", [ref[1]], alone))
    return worst


def build(cfg_dict: dict, seed: int):
    dec = dict(cfg_dict["decoder_config"])
    official = Qwen3TTSTokenizerV2Decoder._from_config(Qwen3TTSTokenizerV2DecoderConfig(**dec))
    official.eval()
    redraw(official, seed)
    ours = SpeechDecoder(SpeechDecoderConfig.from_dict(cfg_dict)).eval()
    ours.load_state_dict(official.state_dict(), strict=True)
    return official, ours


def check_fixture(root: Path) -> float:
    st_dir = root / "speech_tokenizer"
    tok = Qwen3TTSTokenizer.from_pretrained(str(st_dir))
    official = tok.model.decoder.float().eval()
    cfg = SpeechDecoderConfig.from_dict(json.loads((st_dir / "config.json").read_text()))
    ours = SpeechDecoder(cfg).eval()
    ours.load_state_dict(official.state_dict(), strict=True)
    gen = torch.Generator().manual_seed(7)
    codes = [random_codes(gen, n) for n in (650, 300, 26)]
    with torch.inference_mode():
        wavs, _ = tok.decode([{"audio_codes": c} for c in codes])
        got = decode_utterances(ours, codes)
    return compare(
        "fixture tokenizer list [650, 300, 26]", got, [torch.from_numpy(w) for w in wavs]
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixture", type=Path, default=None)
    parser.add_argument("--skip-random", action="store_true", help="only the --fixture check")
    args = parser.parse_args()
    torch.set_num_threads(2)
    worst = 0.0
    for kv_heads, theta, seed in () if args.skip_random else ((4, 10000.0, 0), (2, 1234.0, 1)):
        official, ours = build(tiny_config(kv_heads, theta), seed)
        worst = max(worst, check_pair(official, ours, seed, f"kv{kv_heads}"))
    if args.fixture is not None:
        worst = max(worst, check_fixture(args.fixture))
    print(f"worst max|err| {worst:.2e} (tolerance {TOL:.0e})")
    return 0 if worst <= TOL else 1


if __name__ == "__main__":
    sys.exit(main())
