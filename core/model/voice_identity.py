"""Which Base checkpoint a voice file belongs to: a digest of the encoders that make a voice.

A voice holds what two encoders of a Base checkpoint computed from a clip: the speaker encoder's
x-vector and the speech tokenizer's reference codes. Another checkpoint can use it only if the same
clip would give it the same values, so the identity is a digest of those encoders, and nothing else
of the checkpoint:
- the model type and the speaker encoder's config block, and every `speaker_encoder.*` tensor's
  name, dtype, shape and bytes (read in full: a few MB, about 12 M parameters at the published
  widths). Each Base checkpoint has its own speaker encoder, trained with its talker; the 0.6B and
  1.7B ones differ even in width.
- the speech tokenizer's config.json, its file's size and every `encoder.*` tensor's name, dtype,
  shape and place in the file (the header, not the bytes: the tokenizer is the one 12 Hz
  tokenizer all the published checkpoints share, and reading its encoder in full would cost a
  few hundred MB per job).
A fine-tuned talker over the same encoders shares the identity, rightly: the voice is what its own
encoders would make of the clip. Torch-free (json, struct): the jobs layer asks for it while
validating rows. Knows checkpoint files; no tensors as tensors, no voice files.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterator
from pathlib import Path

RULE = "qtts.voice-identity/1"  # a change of what is hashed changes every identity
SPEAKER_PREFIX = "speaker_encoder."
ENCODER_PREFIX = "encoder."
SPEECH_DIR = "speech_tokenizer"
BLOCK = 1 << 20


def voice_identity(model_dir: Path) -> str | None:
    """The identity voice files made with this checkpoint carry; None when it is not a Base
    checkpoint (no speaker encoder: it clones no voice). OSError/ValueError on unreadable files."""
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text("utf-8"))
    if config.get("tts_model_type") != "base":
        return None
    h = hashlib.sha256(RULE.encode())
    _canonical(h, {k: config.get(k) for k in ("tts_model_type", "speaker_encoder_config")})
    for path, name, entry, start in _tensors(model_dir, "model", SPEAKER_PREFIX):
        _canonical(h, [name, entry["dtype"], entry["shape"]])
        begin, end = entry["data_offsets"]
        with open(path, "rb") as f:
            f.seek(start + begin)
            left = end - begin
            while left > 0:
                block = f.read(min(BLOCK, left))
                if not block:
                    raise ValueError(f"{path}: tensor {name} runs past the end of the file")
                h.update(block)
                left -= len(block)
    speech = model_dir / SPEECH_DIR
    _canonical(h, json.loads((speech / "config.json").read_text("utf-8")))
    for path, name, entry, _ in _tensors(speech, "model", ENCODER_PREFIX):
        _canonical(h, [name, entry["dtype"], entry["shape"], entry["data_offsets"]])
        h.update(f"{path.stat().st_size}".encode())
    return h.hexdigest()[:16]


def _canonical(h, value) -> None:
    h.update(json.dumps(value, sort_keys=True, separators=(",", ":")).encode() + b"\0")


def _tensors(directory: Path, stem: str, prefix: str) -> Iterator[tuple[Path, str, dict, int]]:
    """(file, name, header entry, where its data starts) of each tensor named `prefix`..., by
    name, from `{stem}.safetensors` or the shards its index names."""
    single = directory / f"{stem}.safetensors"
    if single.is_file():
        files = [single]
    else:
        index = json.loads((directory / f"{stem}.safetensors.index.json").read_text("utf-8"))
        shards = {v for k, v in index.get("weight_map", {}).items() if k.startswith(prefix)}
        files = [directory / s for s in sorted(shards)]
    found = []
    for path in files:
        header, start = read_safetensors_header(path)
        found += [(path, k, v, start) for k, v in header.items() if k.startswith(prefix)]
    if not found:
        raise ValueError(f"{directory}: no {prefix}* tensors")
    yield from sorted(found, key=lambda item: item[1])


def read_safetensors_header(path: Path, limit: int = 1 << 27) -> tuple[dict, int]:
    """(the JSON header of a safetensors file, the offset its data starts at). ValueError when the
    file is not one (its first 8 bytes give no JSON header of a sane size)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("too short to be a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if not 2 <= n <= limit:
            raise ValueError("not a safetensors file")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict) or len(raw) < n:
        raise ValueError("not a safetensors file (its header is cut short)")
    return header, 8 + n
