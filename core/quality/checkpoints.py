"""A scorer's checkpoint as the user names it (`--asr-model`, `--speaker-model`): a local folder,
or a Hugging Face repo id from the cache (downloaded when online); and what makes two of them the
same scorer (their files, and a sample of their weights). Knows folders and files; no models."""

from __future__ import annotations

from pathlib import Path

SAMPLE_BYTES = 1 << 20  # of each weights file, read for the identity


def model_dir(model: str, option: str) -> Path:
    """`option`'s value as a local directory: a directory as given, or a repo id from the
    Hugging Face cache (downloaded when online); a one-line ModelLoadError otherwise."""
    from qtts.core.model.hub import ModelLoadError, one_line

    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelLoadError(f"{option} {model} is a file; pass the checkpoint directory")
    import huggingface_hub

    try:
        return Path(huggingface_hub.snapshot_download(model, local_files_only=True))
    except Exception:  # noqa: BLE001 -- not cached: try the Hub below
        pass
    try:
        return Path(huggingface_hub.snapshot_download(model))
    except Exception as exc:  # noqa: BLE001 -- offline, unknown repo, gated: one line
        raise ModelLoadError(
            f"{option} {model} is neither a directory nor a downloadable Hugging Face repo "
            f"({type(exc).__name__}: {one_line(exc)}); download it with "
            f"`hf download {model} --local-dir DIR` and pass {option} DIR"
        ) from None


def files_identity(directory: Path) -> str:
    """The checkpoint's config, tokenizer and weights headers (checkpoint_identity), and a digest
    of SAMPLE_BYTES at the start, middle and end of each weights file: a fine-tune has the same
    config and tensor layout as its base, not the same weights."""
    import hashlib

    from qtts.core.model.hub import checkpoint_identity

    h = hashlib.sha256()
    for path in sorted(directory.glob("*.safetensors")):
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            for start in sorted({0, size // 2, max(size - SAMPLE_BYTES, 0)}):
                f.seek(start)
                h.update(f.read(SAMPLE_BYTES))
    return f"{checkpoint_identity(directory)}{h.hexdigest()[:8]}"
