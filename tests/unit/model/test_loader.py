"""Checkpoint resolution, layout checks, safetensors reading and strict loading (no network)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError
from safetensors.torch import save_file
from torch import nn

from qtts.core.model import hub, loader
from qtts.core.model.loader import (
    ModelLoadError,
    check_checkpoint_files,
    load_strict,
    parse_device,
    parse_dtype,
    read_safetensors,
    resolve_model_dir,
)

REPO = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"


class Tiny(nn.Module):
    """A persistent int buffer, a float param tree, and a non-persistent RoPE-like buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(torch.ones(3))
        self.register_buffer("steps", torch.zeros(2, dtype=torch.long))
        self.register_buffer("inv_freq", torch.tensor([0.0, 1.0, 2.0, 3.0]), persistent=False)


def tiny_tensors(dtype: torch.dtype = torch.float32, prefix: str = "") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        f"{prefix}proj.weight": torch.randn(3, 4, generator=g).to(dtype),
        f"{prefix}proj.bias": torch.randn(3, generator=g).to(dtype),
        f"{prefix}norm.weight": torch.randn(3, generator=g).to(dtype),
        f"{prefix}steps": torch.tensor([5, 7], dtype=torch.long),
    }


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg
    return msg


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Offline by default; any real snapshot_download call fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise AssertionError("test tried to reach the Hugging Face Hub")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)


# ----------------------------------------------------------------------------- safetensors files


def test_read_single_file(tmp_path):
    src = tiny_tensors()
    save_file(src, tmp_path / "model.safetensors")
    got = read_safetensors(tmp_path)
    assert set(got) == set(src)
    for k, t in src.items():
        assert torch.equal(got[k], t)


def write_sharded(directory: Path, tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[:2],
        "model-00002-of-00002.safetensors": names[2:],
    }
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, directory / shard)
        weight_map.update({k: shard for k in keys})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return weight_map


def test_read_sharded(tmp_path):
    src = tiny_tensors()
    write_sharded(tmp_path, src)
    got = read_safetensors(tmp_path)
    assert set(got) == set(src)
    for k, t in src.items():
        assert torch.equal(got[k], t)


def test_sharded_missing_shard_named(tmp_path):
    write_sharded(tmp_path, tiny_tensors())
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelLoadError) as exc:
        read_safetensors(tmp_path)
    assert "model-00002-of-00002.safetensors" in one_line(exc)


def test_sharded_tensor_absent_from_its_shard(tmp_path):
    weight_map = write_sharded(tmp_path, tiny_tensors())
    weight_map["talker.extra.weight"] = "model-00001-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ModelLoadError) as exc:
        read_safetensors(tmp_path)
    assert "talker.extra.weight" in one_line(exc)


def test_no_weights_and_corrupt_file(tmp_path):
    with pytest.raises(ModelLoadError) as exc:
        read_safetensors(tmp_path, stem="model")
    assert "model.safetensors" in one_line(exc)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelLoadError) as exc:
        read_safetensors(tmp_path)
    assert str(tmp_path / "model.safetensors") in one_line(exc)


# ----------------------------------------------------------------------------- strict loading


def test_load_strict_values_and_buffers():
    m = Tiny()
    src = tiny_tensors()
    load_strict(m, src, source="model.safetensors", dtype=torch.float32, device="cpu")
    assert torch.equal(m.proj.weight, src["proj.weight"])
    assert torch.equal(m.norm.weight, src["norm.weight"])
    assert torch.equal(m.steps, src["steps"])
    assert isinstance(m.proj.weight, nn.Parameter)
    assert torch.equal(m.inv_freq, torch.arange(4.0))  # non-persistent: untouched, not expected


@pytest.mark.parametrize(
    ("src_dtype", "dtype"),
    [
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.bfloat16),
        (torch.float16, torch.float32),
        (torch.float32, torch.float16),
    ],
)
def test_load_strict_casts_floats_only(src_dtype, dtype):
    m = Tiny()
    src = tiny_tensors(src_dtype)
    load_strict(m, src, source="x", dtype=dtype, device=torch.device("cpu"))
    assert m.proj.weight.dtype == dtype and m.norm.weight.dtype == dtype
    assert torch.equal(m.proj.weight, src["proj.weight"].to(dtype))
    assert m.steps.dtype == torch.long  # integer buffers keep their dtype
    assert m.inv_freq.dtype == torch.float32  # RoPE frequencies stay fp32


def test_load_strict_meta_module():
    with torch.device("meta"):
        m = Tiny()
    load_strict(m, tiny_tensors(), source="x", dtype=torch.float32, device="cpu")
    assert m.proj.weight.device.type == "cpu"
    assert m.proj(torch.ones(1, 4)).shape == (1, 3)
    assert m.inv_freq.is_meta  # non-persistent meta buffers are the caller's to rebuild


def test_load_strict_missing_tensor():
    src = tiny_tensors()
    del src["norm.weight"]
    with pytest.raises(ModelLoadError) as exc:
        load_strict(Tiny(), src, source="ckpt/model.safetensors", dtype=torch.float32, device="cpu")
    msg = one_line(exc)
    assert "norm.weight" in msg and "missing" in msg and "ckpt/model.safetensors" in msg
    assert "[3]" in msg


def test_load_strict_unexpected_tensor():
    src = tiny_tensors()
    src["talker.codec_head.weight"] = torch.zeros(5, 2)
    with pytest.raises(ModelLoadError) as exc:
        load_strict(Tiny(), src, source="model.safetensors", dtype=torch.float32, device="cpu")
    msg = one_line(exc)
    assert "talker.codec_head.weight" in msg and "unexpected" in msg


def test_load_strict_wrong_shape_names_both_shapes():
    src = tiny_tensors(prefix="decoder.")
    src["decoder.proj.weight"] = torch.zeros(3, 5)
    with pytest.raises(ModelLoadError) as exc:
        load_strict(
            Tiny(),
            src,
            source="st/model.safetensors",
            dtype=torch.float32,
            device="cpu",
            prefix="decoder.",
        )
    msg = one_line(exc)
    assert "decoder.proj.weight" in msg and "[3, 5]" in msg and "[3, 4]" in msg
    assert "st/model.safetensors" in msg


def test_load_strict_prefix_and_ignore_prefixes():
    src = tiny_tensors(prefix="decoder.")
    src["encoder.conv.weight"] = torch.zeros(2)  # outside the prefix: not this module's business
    m = Tiny()
    load_strict(m, src, source="x", dtype=torch.float32, device="cpu", prefix="decoder.")
    assert torch.equal(m.proj.bias, src["decoder.proj.bias"])

    flat = tiny_tensors()
    flat["encoder.conv.weight"] = torch.zeros(2)
    with pytest.raises(ModelLoadError, match="encoder.conv.weight"):
        load_strict(Tiny(), flat, source="x", dtype=torch.float32, device="cpu")
    load_strict(
        Tiny(), flat, source="x", dtype=torch.float32, device="cpu", ignore_prefixes=("encoder.",)
    )


def test_load_strict_rejects_float_for_int_buffer():
    src = tiny_tensors()
    src["steps"] = torch.zeros(2)
    with pytest.raises(ModelLoadError, match="steps"):
        load_strict(Tiny(), src, source="x", dtype=torch.float32, device="cpu")


# ----------------------------------------------------------------------------- device / dtype


def test_parse_device_cpu_and_auto(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert parse_device("cpu") == torch.device("cpu")
    assert parse_device("auto") == torch.device("cpu")
    for bad in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match="CUDA is not available"):
            parse_device(bad)
    for bad in ("mps", "gpu", "cuda:x"):
        with pytest.raises(ValueError):
            parse_device(bad)


def test_parse_device_cuda_index(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert parse_device("auto") == torch.device("cuda", 0)
    assert parse_device("cuda") == torch.device("cuda", 0)
    assert parse_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="only 2 CUDA device"):
        parse_device("cuda:2")


def test_parse_dtype():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert parse_dtype("auto", cpu) == torch.float32
    assert parse_dtype("auto", cuda) == torch.bfloat16
    assert parse_dtype("float32", cuda) == torch.float32
    assert parse_dtype("bfloat16", cpu) == torch.bfloat16
    assert parse_dtype("float16", cpu) == torch.float16
    with pytest.raises(ValueError, match="float64"):
        parse_dtype("float64", cpu)


# ----------------------------------------------------------------------------- layout


def make_checkpoint_files(d: Path, *, tokenizer_json: bool = False) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3_tts"}))
    (d / "generation_config.json").write_text("{}")
    if tokenizer_json:
        (d / "tokenizer.json").write_text("{}")
    else:
        (d / "vocab.json").write_text("{}")
        (d / "merges.txt").write_text("")
    save_file({"w": torch.zeros(1)}, d / "model.safetensors")
    st = d / "speech_tokenizer"
    st.mkdir()
    (st / "config.json").write_text(json.dumps({"model_type": "qwen3_tts_tokenizer_12hz"}))
    save_file({"w": torch.zeros(1)}, st / "model.safetensors")
    return d


def test_layout_complete(tmp_path):
    """A BPE tokenizer (vocab.json + merges.txt) or a tokenizer.json alone makes it complete."""
    bpe = make_checkpoint_files(tmp_path / "a")
    fast = make_checkpoint_files(tmp_path / "b", tokenizer_json=True)
    assert not (fast / "vocab.json").exists() and not (fast / "merges.txt").exists()
    assert hub.checkpoint_problem(bpe) is None and hub.checkpoint_problem(fast) is None
    check_checkpoint_files(bpe)  # raises nothing
    check_checkpoint_files(fast)
    (fast / "tokenizer.json").unlink()
    assert hub.checkpoint_problem(fast).startswith("missing text tokenizer")


@pytest.mark.parametrize(
    ("remove", "named"),
    [
        ("config.json", "config.json"),
        ("generation_config.json", "generation_config.json"),
        ("merges.txt", "merges.txt"),
        ("model.safetensors", "model.safetensors"),
        ("speech_tokenizer/config.json", "speech_tokenizer/config.json"),
        ("speech_tokenizer/model.safetensors", "speech_tokenizer/model.safetensors"),
        ("speech_tokenizer", "speech_tokenizer/"),
    ],
)
def test_layout_missing_piece_named(tmp_path, remove, named):
    d = make_checkpoint_files(tmp_path / "m")
    target = d / remove
    if target.is_dir():
        for f in target.iterdir():
            f.unlink()
        target.rmdir()
    else:
        target.unlink()
    with pytest.raises(ModelLoadError) as exc:
        check_checkpoint_files(d)
    msg = one_line(exc)
    assert msg.startswith("missing") and named in msg and str(d) in msg


def test_layout_wrong_model_types(tmp_path):
    d = make_checkpoint_files(tmp_path / "m")
    (d / "speech_tokenizer" / "config.json").write_text(
        json.dumps({"model_type": "qwen3_tts_tokenizer_25hz"})
    )
    with pytest.raises(ModelLoadError, match="25 Hz"):
        check_checkpoint_files(d)
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelLoadError, match="llama"):
        check_checkpoint_files(d)


# ----------------------------------------------------------------------------- resolution


def test_resolve_local_dir(tmp_path):
    assert resolve_model_dir(str(tmp_path)) == tmp_path


def test_resolve_bad_local_paths(tmp_path):
    """A local path that is no checkpoint directory is the user's argument gone wrong, nothing
    done: a usage error (exit 2), still a ModelLoadError for the code that catches those."""
    with pytest.raises(ModelLoadError) as exc:
        resolve_model_dir(str(tmp_path / "nope"))
    assert str(tmp_path / "nope") in one_line(exc) and exc.value.exit_code == 2
    f = tmp_path / "file.bin"
    f.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="is a file") as exc:
        resolve_model_dir(str(f))
    assert exc.value.exit_code == 2


class FakeHub:
    """snapshot_download stand-in: a cached dir (or None) and an online result (dir or error)."""

    def __init__(self, cached: Path | None, online: Path | Exception | None = None) -> None:
        self.cached, self.online, self.calls = cached, online, []

    def __call__(self, repo_id, *, local_files_only=False, **kwargs):
        self.calls.append(("cache" if local_files_only else "online", repo_id))
        if local_files_only:
            if self.cached is None:
                raise LocalEntryNotFoundError("Cannot find the requested files in the disk cache")
            return str(self.cached)
        if isinstance(self.online, Exception):
            raise self.online
        assert self.online is not None, "online download was not expected"
        return str(self.online)


def go_online(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)


def test_resolve_repo_from_cache(tmp_path, monkeypatch):
    fake = FakeHub(cached=make_checkpoint_files(tmp_path / "snap"))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert resolve_model_dir(REPO) == tmp_path / "snap"
    assert fake.calls == [("cache", REPO)]


def test_resolve_repo_offline_missing(monkeypatch):
    fake = FakeHub(cached=None)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with pytest.raises(ModelLoadError) as exc:
        resolve_model_dir(REPO)
    msg = one_line(exc)
    assert REPO in msg and "hf download" in msg and "--model" in msg and "HF_HUB_OFFLINE" in msg
    assert fake.calls == [("cache", REPO)]


def test_resolve_repo_online(tmp_path, monkeypatch):
    go_online(monkeypatch)
    fake = FakeHub(cached=None, online=tmp_path)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert resolve_model_dir(REPO) == tmp_path
    assert fake.calls == [("cache", REPO), ("online", REPO)]


def test_resolve_partial_cache_goes_online(tmp_path, monkeypatch):
    go_online(monkeypatch)
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    fake = FakeHub(cached=partial, online=make_checkpoint_files(tmp_path / "full"))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert resolve_model_dir(REPO) == tmp_path / "full"


def test_resolve_repo_online_errors(monkeypatch):
    go_online(monkeypatch)
    not_found = RepositoryNotFoundError.__new__(RepositoryNotFoundError)
    Exception.__init__(not_found, "404 Client Error.\n\nRepository Not Found for url")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", FakeHub(None, not_found))
    with pytest.raises(ModelLoadError) as exc:
        resolve_model_dir("Qwen/No-Such-Model")
    assert "Qwen/No-Such-Model" in one_line(exc)

    unreachable = LocalEntryNotFoundError("Cannot reach the Hub.\nCheck your connection.")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", FakeHub(None, unreachable))
    with pytest.raises(ModelLoadError) as exc:
        resolve_model_dir(REPO)
    msg = one_line(exc)
    assert "Cannot reach the Hub." in msg and "hf download" in msg


def test_hub_module_is_torch_free():
    """The CLI imports hub (for ModelLoadError) at top level; it must not pull in torch."""
    code = (
        "import sys, qtts.core.model.hub; "
        "print('torch' in sys.modules, 'huggingface_hub' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert loader.ModelLoadError is hub.ModelLoadError


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_load_strict_to_cuda():
    device = parse_device("auto")
    assert device.type == "cuda" and parse_dtype("auto", device) == torch.bfloat16
    m = Tiny()
    load_strict(m, tiny_tensors(), source="x", dtype=torch.bfloat16, device=device)
    assert m.proj.weight.device == device and m.proj.weight.dtype == torch.bfloat16
    assert m.steps.device == device and m.steps.dtype == torch.long
    assert m.inv_freq.device == device and m.inv_freq.dtype == torch.float32


def test_loading_on_cuda_n_makes_it_the_current_device_first(monkeypatch):
    """Streams, events and graph captures made without a device use the current one: a job on
    cuda:1 must make cuda:1 current before any of them exist (else its graphs capture nothing)."""
    from qtts.core.model import loader
    from qtts.core.synthesis import synthesizer

    events = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: events.append(("set_device", d)))
    monkeypatch.setattr(synthesizer, "parse_device", lambda name: torch.device("cuda", 1))
    monkeypatch.setattr(synthesizer, "parse_dtype", lambda name, dev: torch.bfloat16)

    def load_weights(model_dir, config, device, dtype):
        events.append(("load", device))
        raise RuntimeError("stop here")

    monkeypatch.setattr(synthesizer, "load_weights", load_weights)
    with pytest.raises(RuntimeError, match="stop here"):
        synthesizer.Synthesizer.load(SimpleNamespace(model_dir=None, config=None), "cuda:1", "auto")
    assert events == [("set_device", torch.device("cuda", 1)), ("load", torch.device("cuda", 1))]
    loader.use_device(torch.device("cpu"))  # nothing to do on CPU
    assert len(events) == 2


def test_resolve_mistyped_path_beside_a_local_folder(tmp_path, monkeypatch):
    """ "models/x" where models/ is a local folder and no such repo is cached: a mistyped path,
    said as one (exit 2) without a download attempt; the same name cached still resolves."""
    go_online(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    fake = FakeHub(cached=None, online=RuntimeError("must not go online"))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with pytest.raises(ModelLoadError) as exc:
        resolve_model_dir("models/x")
    msg = one_line(exc)
    assert exc.value.exit_code == 2 and "models/ has no x" in msg and "hf download" in msg
    assert fake.calls == [("cache", "models/x")]
    fake = FakeHub(cached=make_checkpoint_files(tmp_path / "snap"))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert resolve_model_dir("models/x") == tmp_path / "snap"
