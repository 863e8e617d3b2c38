"""Weights: safetensors files -> tensors -> an nn.Module, strictly; device and dtype choice.

Owns reading single-file and sharded safetensors checkpoints, the strict name/shape match between a
file and a module (every mismatch is a one-line ModelLoadError naming the tensor and the file), the
dtype cast on load, and parsing `--device` / `--dtype`. Knows no model architecture: callers build
the module (possibly on the meta device) and say which prefix of the file belongs to it.
Resolution and layout checks live in qtts.core.model.hub (torch-free); ModelLoadError is
re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor, nn

from qtts.core.model.cpu_precision import auto_cpu_precision
from qtts.core.model.hub import ModelLoadError, check_checkpoint_files, one_line, resolve_model_dir

__all__ = [
    "ModelLoadError",
    "check_checkpoint_files",
    "load_strict",
    "parse_device",
    "use_device",
    "parse_dtype",
    "read_prefixed",
    "read_safetensors",
    "resolve_model_dir",
]

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def read_safetensors(directory: Path, stem: str = "model") -> dict[str, Tensor]:
    """All tensors of `{stem}.safetensors`, or of the shards its `.index.json` names, on CPU."""
    d = Path(directory)
    single = d / f"{stem}.safetensors"
    index = d / f"{stem}.safetensors.index.json"
    if single.is_file():
        try:
            return load_file(single)
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(f"cannot read {single}: {one_line(exc)}") from None
    if index.is_file():
        return _read_sharded(d, index)
    raise ModelLoadError(f"no {single.name} or {index.name} in {d}")


def read_prefixed(directory: Path, prefix: str, stem: str = "model") -> dict[str, Tensor]:
    """The tensors of `{stem}.safetensors` (or its shards) whose names start with `prefix`, on
    CPU, the others never read: a Base checkpoint's speaker encoder without its talker."""
    d = Path(directory)
    single, index = d / f"{stem}.safetensors", d / f"{stem}.safetensors.index.json"
    if single.is_file():
        names = {single.name: None}
    elif index.is_file():
        names = {v: None for k, v in _read_weight_map(index).items() if k.startswith(prefix)}
    else:
        raise ModelLoadError(f"no {single.name} or {index.name} in {d}")
    tensors: dict[str, Tensor] = {}
    for shard in names:
        path = d / shard
        try:
            with safe_open(path, framework="pt", device="cpu") as f:
                for name in f.keys():
                    if name.startswith(prefix):
                        tensors[name] = f.get_tensor(name)
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(f"cannot read {path}: {one_line(exc)}") from None
    return tensors


def _read_weight_map(index: Path) -> dict[str, str]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {index}: {one_line(exc)}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelLoadError(f"{index} has no weight_map (tensor name -> shard file)")
    return weight_map


def _read_sharded(directory: Path, index: Path) -> dict[str, Tensor]:
    """Each tensor from the shard the index maps it to; shards are opened one at a time."""
    by_shard: dict[str, list[str]] = {}
    for name, shard in _read_weight_map(index).items():
        by_shard.setdefault(shard, []).append(name)
    tensors: dict[str, Tensor] = {}
    for shard, names in by_shard.items():
        path = directory / shard
        if not path.is_file():
            raise ModelLoadError(
                f"missing shard {shard} in {directory} ({index.name} maps {names[0]} to it); "
                "re-download the model"
            )
        try:
            with safe_open(path, framework="pt", device="cpu") as f:
                present = set(f.keys())
                for name in names:
                    if name not in present:
                        raise ModelLoadError(
                            f"{path}: tensor {name} is missing ({index.name} maps it to this shard)"
                        )
                    tensors[name] = f.get_tensor(name)
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(f"cannot read {path}: {one_line(exc)}") from None
    return tensors


def _shape(t: Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _more(names: list[str]) -> str:
    return f" (and {len(names) - 1} more)" if len(names) > 1 else ""


def _select(
    tensors: dict[str, Tensor], prefix: str, ignore_prefixes: Iterable[str]
) -> dict[str, Tensor]:
    """File tensors under `prefix`, renamed without it; `ignore_prefixes` match full file names."""
    ignored = tuple(ignore_prefixes)
    return {
        name[len(prefix) :]: t
        for name, t in tensors.items()
        if name.startswith(prefix) and not (ignored and name.startswith(ignored))
    }


def _check_names_and_shapes(
    expected: dict[str, Tensor], found: dict[str, Tensor], source: str, prefix: str
) -> None:
    missing = [k for k in expected if k not in found]
    if missing:
        k = missing[0]
        raise ModelLoadError(
            f"{source}: missing tensor {prefix}{k} (expected shape {_shape(expected[k])})"
            f"{_more(missing)}; the checkpoint does not match this model"
        )
    unexpected = [k for k in found if k not in expected]
    if unexpected:
        k = unexpected[0]
        raise ModelLoadError(
            f"{source}: unexpected tensor {prefix}{k} (shape {_shape(found[k])}) that the model "
            f"does not have{_more(unexpected)}; the checkpoint does not match this model"
        )
    for k, ref in expected.items():
        t = found[k]
        if t.shape != ref.shape:
            raise ModelLoadError(
                f"{source}: tensor {prefix}{k} has shape {_shape(t)}, expected {_shape(ref)}; "
                "the checkpoint does not match this model's config"
            )
        if t.is_floating_point() != ref.is_floating_point():
            raise ModelLoadError(
                f"{source}: tensor {prefix}{k} has dtype {t.dtype}, expected {ref.dtype}"
            )


def load_strict(
    module: nn.Module,
    tensors: dict[str, Tensor],
    *,
    source: str,
    dtype: torch.dtype,
    device: torch.device | str,
    prefix: str = "",
    ignore_prefixes: Iterable[str] = (),
) -> None:
    """Load `tensors[prefix + name]` into `module` by exact name and shape, cast and placed.

    Floating tensors are cast to `dtype`; integer/bool ones keep the module's dtype. Tensors are
    assigned (not copied into existing storage), so `module` may be built on the meta device and
    the weights occupy `device` memory once. Non-persistent buffers (RoPE inv_freq) are not read
    from the file; they are moved to `device` keeping their dtype (meta ones the caller rebuilds).
    Parameters shared under two names would be untied (the Qwen3-TTS checkpoints have none).
    """
    device = torch.device(device)
    expected = module.state_dict()  # persistent entries only, by construction
    found = _select(tensors, prefix, ignore_prefixes)
    _check_names_and_shapes(expected, found, source, prefix)
    placed = {
        k: t.to(device=device, dtype=dtype if t.is_floating_point() else expected[k].dtype)
        for k, t in found.items()
    }
    module.load_state_dict(placed, strict=True, assign=True)
    for sub in module.modules():
        for name in sub._non_persistent_buffers_set:
            buf = sub._buffers.get(name)
            if buf is not None and not buf.is_meta:
                sub._buffers[name] = buf.to(device)


def parse_device(name: str) -> torch.device:
    """`--device`: auto (cuda if available, else cpu), cpu, cuda, cuda:N; one-line ValueError."""
    text = name.strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return torch.device("cpu")
    if text != "cuda" and not text.startswith("cuda:"):
        raise ValueError(f"--device {name!r}: use auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {name}: CUDA is not available on this machine; use --device cpu"
        )
    count = torch.cuda.device_count()
    if text == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    index = text.removeprefix("cuda:")
    if not index.isdigit():
        raise ValueError(f"--device {name!r}: use cuda:N with N a GPU index")
    if int(index) >= count:
        raise ValueError(f"--device {name}: only {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
    return torch.device("cuda", int(index))


def use_device(device: torch.device) -> None:
    """Make `device` the current CUDA device. Streams, events and graph captures made without an
    explicit device land on the current one: on cuda:1 with cuda:0 current, a captured graph
    would record nothing (its kernels run on cuda:1's streams) and replays would do nothing."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def parse_dtype(name: str, device: torch.device) -> torch.dtype:
    """`--dtype`: auto (bfloat16 on CUDA; on a CPU bfloat16 where it multiplies bf16 natively,
    else float32: core/model/cpu_precision.py), float32, bfloat16, float16."""
    text = name.strip().lower()
    if text == "auto":
        kind = torch.device(device).type
        if kind == "cpu":
            return _DTYPES[auto_cpu_precision().dtype]
        return torch.bfloat16 if kind == "cuda" else torch.float32
    if text not in _DTYPES:
        raise ValueError(f"--dtype {name!r}: use auto, float32, bfloat16 or float16")
    return _DTYPES[text]
