"""What `--dtype auto` picks on a CPU: bf16 where the CPU multiplies bf16 natively (AMX or
AVX512-BF16), float32 elsewhere; QTTS_CPU_BF16 overrides the flags, and a bad value is refused."""

import pytest

from qtts.core.errors import UsageError
from qtts.core.model.cpu_precision import auto_cpu_precision, read_bf16_knob

AUTO = {"QTTS_CPU_BF16": "auto"}


@pytest.mark.parametrize(
    ("flags", "dtype", "said"),
    [
        ({"amx_bf16", "amx_tile", "avx512_bf16", "avx2"}, "bfloat16", "natively (amx_bf16)"),
        ({"avx512_bf16", "avx512f"}, "bfloat16", "natively (avx512_bf16)"),
        ({"avx2", "fma"}, "float32", "no native bf16 units"),
        (set(), "float32", "features are unknown"),
    ],
)
def test_the_flags_decide_auto(flags, dtype, said):
    auto = auto_cpu_precision(frozenset(flags), AUTO)
    assert auto.dtype == dtype and said in auto.reason


@pytest.mark.parametrize(("knob", "dtype"), [("1", "bfloat16"), ("0", "float32")])
def test_the_knob_overrides_the_flags(knob, dtype):
    for flags in (frozenset(), frozenset({"amx_bf16"})):
        auto = auto_cpu_precision(flags, {"QTTS_CPU_BF16": knob})
        assert (auto.dtype, auto.reason) == (dtype, f"QTTS_CPU_BF16={knob}")


def test_an_unset_or_empty_knob_is_auto_and_a_bad_one_is_a_usage_error():
    assert read_bf16_knob({}) == read_bf16_knob({"QTTS_CPU_BF16": " "}) == "auto"
    assert auto_cpu_precision(frozenset({"avx512_bf16"}), {}).dtype == "bfloat16"
    with pytest.raises(UsageError, match="QTTS_CPU_BF16 must be one of auto, 1, 0, got 'yes'"):
        auto_cpu_precision(frozenset(), {"QTTS_CPU_BF16": "yes"})
