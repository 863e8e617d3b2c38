"""Where a checkpoint lives: `--model` (local dir or HF repo id) -> a complete local directory.

Owns ModelLoadError (the one-line, user-facing error the CLI maps to exit 1), Hugging Face Hub
resolution (cache first, then download) and the checkpoint layout check (docs/model.md, "Checkpoint
layout"). Must not import torch: the CLI imports this module to map errors, and `qtts --help` must
be instant. Knows file names, not tensors.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from qtts.core.errors import EXIT_USAGE, FatalError

# The published repos keep config.json at the top and the codec under speech_tokenizer/.
_SPEECH_DIR = "speech_tokenizer"
_MODEL_TYPE = "qwen3_tts"
_SPEECH_MODEL_TYPE = "qwen3_tts_tokenizer_12hz"
# "org/name": what the Hub accepts as a model id (no "..", no leading "." or "-").
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


class ModelLoadError(FatalError):
    """Checkpoint not found, not downloadable, unreadable or not matching the model (one line)."""


class ModelPathError(ModelLoadError):
    """--model names a local path that is no checkpoint directory (missing, or a file): the
    argument is wrong and nothing was done, so it exits as a usage error (2), not a fatal one."""

    exit_code = EXIT_USAGE


def one_line(exc: BaseException) -> str:
    """First non-empty line of an exception's text (hub errors carry multi-line advice)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def _download_hint(repo_id: str) -> str:
    return f"download it with `hf download {repo_id} --local-dir DIR` and pass --model DIR"


def _hub_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return bool(constants.HF_HUB_OFFLINE) or env in {"1", "ON", "YES", "TRUE"}


def resolve_model_dir(model: str) -> Path:
    """Map `--model` to a local checkpoint directory, downloading a Hub repo id if needed.

    A path that exists must be a directory. Otherwise an "org/name" string is a Hub repo id: the
    local HF cache is tried first (no network), then the Hub unless HF_HUB_OFFLINE is set. An
    "org/name" whose org is a local folder goes no further than the cache.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelPathError(f"--model {model} is a file; pass the checkpoint directory")
    if not _REPO_ID.match(model):
        raise ModelPathError(
            f"model directory {model} does not exist (pass a checkpoint directory or an HF repo "
            "id like Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice)"
        )
    # "models/x" beside a local models/ folder is far likelier a mistyped path than a Hub repo:
    # say so from the cache alone instead of a download error about a repo the user never meant.
    folder = path.parent
    if folder.is_dir():
        return _snapshot(
            model,
            missing=ModelPathError(
                f"model directory {model} does not exist ({folder}/ has no {path.name}; qtts "
                f"did not try the Hub, as {folder}/ is a local folder); for the Hub repo "
                f"{model}, " + _download_hint(model)
            ),
        )
    return _snapshot(model)


def _snapshot(repo_id: str, missing: ModelLoadError | None = None) -> Path:
    """Cache first (a partial cached snapshot counts as a miss), then an online snapshot; with
    `missing`, a cache miss raises it instead of going online."""
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        cached = Path(huggingface_hub.snapshot_download(repo_id, local_files_only=True))
        if checkpoint_problem(cached) is None:
            return cached
    except Exception:  # not cached (LocalEntryNotFoundError) or unusable: fall through to online
        pass
    if missing is not None:
        raise missing
    if _hub_offline():
        raise ModelLoadError(
            f"{repo_id} is not (completely) in the Hugging Face cache and HF_HUB_OFFLINE is set; "
            + _download_hint(repo_id)
        )
    try:
        return Path(huggingface_hub.snapshot_download(repo_id))
    except GatedRepoError:
        raise ModelLoadError(
            f"{repo_id} is gated on the Hugging Face Hub: accept its terms and log in "
            "(`hf auth login`), or " + _download_hint(repo_id)
        ) from None
    except RepositoryNotFoundError:
        raise ModelLoadError(
            f"{repo_id} is neither a local directory nor a model on the Hugging Face Hub "
            "(check the spelling; private repos need `hf auth login`)"
        ) from None
    except Exception as exc:  # offline, connection, disk: the hub already fell back to the cache
        raise ModelLoadError(
            f"cannot download {repo_id} ({type(exc).__name__}: {one_line(exc)}); "
            + _download_hint(repo_id)
        ) from None


def _weights_present(directory: Path, stem: str = "model") -> bool:
    names = (f"{stem}.safetensors", f"{stem}.safetensors.index.json")
    return any((directory / n).is_file() for n in names)


def _model_type_problem(config_path: Path, expected: str) -> str | None:
    """A wrong `model_type` in a config file (absent is tolerated: hand-written test configs)."""
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"cannot read {config_path}: {one_line(exc)}"
    if not isinstance(data, dict):
        return f"{config_path} is not a JSON object"
    found = data.get("model_type")
    if found is None or found == expected:
        return None
    if expected == _SPEECH_MODEL_TYPE and "25hz" in str(found):
        return (
            f"{config_path}: the 25 Hz speech tokenizer is not supported (qtts runs 12 Hz models)"
        )
    return (
        f"{config_path}: model_type {found!r} is not {expected!r}; not a Qwen3-TTS 12 Hz checkpoint"
    )


def checkpoint_problem(model_dir: Path) -> str | None:
    """The first missing or wrong piece of a checkpoint directory as a one-line message, or None."""
    d = Path(model_dir)
    hint = "re-download the full model repo"
    for name in ("config.json", "generation_config.json"):
        if not (d / name).is_file():
            return f"missing {name} in {d}: not a complete Qwen3-TTS checkpoint; {hint}"
    has_bpe = (d / "vocab.json").is_file() and (d / "merges.txt").is_file()
    if not (has_bpe or (d / "tokenizer.json").is_file()):
        return f"missing text tokenizer in {d}: need vocab.json + merges.txt (or tokenizer.json)"
    if not _weights_present(d):
        return (
            f"missing model weights in {d}: need model.safetensors or model.safetensors.index.json"
        )
    speech = d / _SPEECH_DIR
    if not speech.is_dir():
        return (
            f"missing {_SPEECH_DIR}/ in {d}: the speech tokenizer (audio decoder) ships inside "
            f"the model repo; {hint}"
        )
    if not (speech / "config.json").is_file():
        return f"missing {_SPEECH_DIR}/config.json in {d}: {hint}"
    if not _weights_present(speech):
        return f"missing {_SPEECH_DIR}/model.safetensors in {d}: {hint}"
    return _model_type_problem(d / "config.json", _MODEL_TYPE) or _model_type_problem(
        speech / "config.json", _SPEECH_MODEL_TYPE
    )


def check_checkpoint_files(model_dir: Path) -> None:
    """Raise ModelLoadError naming the first missing piece of the checkpoint directory."""
    problem = checkpoint_problem(model_dir)
    if problem is not None:
        raise ModelLoadError(problem)


IDENTITY_SUFFIXES = (".json", ".txt", ".model", ".safetensors")  # config, tokenizer, weights


def checkpoint_identity(model_dir: Path) -> str:
    """A digest of what the checkpoint holds, read cheaply: its config and tokenizer files in
    full, and each safetensors file's header (names, shapes, dtypes, offsets) and size, not its
    tensors. The same files anywhere give the same digest; a changed file changes it."""
    import hashlib
    import struct

    h = hashlib.sha256()
    for sub in (model_dir, model_dir / _SPEECH_DIR):
        if not sub.is_dir():  # a checkpoint without a codec (an ASR model for qtts score)
            continue
        for path in sorted(p for p in sub.iterdir() if p.suffix in IDENTITY_SUFFIXES):
            h.update(f"{path.relative_to(model_dir)}\0".encode())
            with open(path, "rb") as f:
                if path.suffix == ".safetensors":
                    size = os.fstat(f.fileno()).st_size
                    (n,) = struct.unpack("<Q", f.read(8))
                    h.update(f"{size}\0".encode() + f.read(min(n, size)))
                else:
                    h.update(f.read())
    return h.hexdigest()[:16]
