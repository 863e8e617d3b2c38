#!/usr/bin/env bash
# Every GPU check in one call, for a session that is lent a GPU machine (device tool).
#
#   bash tools/gpu_checks.sh prepare   # here, once: wheels the GPU image lacks -> .whl/
#                                      # (and `echo /.whl/ >> .git/info/exclude`)
#   bash tools/gpu_checks.sh run       # on the GPU machine (device tool, carry [".whl"]):
#                                      # qtts doctor, tests/gpu, qtts bench 0.6b and 1.7b,
#                                      # logs in $OUT
#
# The GPU image has torch, triton, transformers, pyarrow, typer, safetensors, tqdm, filelock and
# huggingface_hub; it lacks soundfile (+ cffi, pycparser) and soxr.
#
# Strict mode: setup failures stop the script. Each check runs even if an earlier one failed (one
# device call should bring back every figure), and the exit status is 1 if any check failed.
set -euo pipefail
cd "$(dirname "$0")/.."

failed=()
check() {  # check NAME LOG COMMAND...: run, tee the output to $OUT/LOG, remember a failure
  local name=$1 log=$2
  shift 2
  echo "== $name" | tee -a "$OUT/summary.txt"
  if "$@" 2>&1 | tee "$OUT/$log"; then
    echo "   ok" | tee -a "$OUT/summary.txt"
  else
    echo "   FAILED ($name)" | tee -a "$OUT/summary.txt"
    failed+=("$name")
  fi
}

case "${1:-run}" in
prepare)
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl soundfile cffi pycparser soxr
  ;;
run)
  OUT="${OUT:-/tmp/qtts-gpu}"
  mkdir -p "$OUT"
  : > "$OUT/summary.txt"
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
  fi
  python3 -m pip install -q --no-deps --no-build-isolation -e .
  nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
    | tee -a "$OUT/gpu.txt"
  check "doctor 0.6b" doctor_0.6b.log python3 -m qtts doctor --size 0.6b
  check "tests/gpu" gpu_tests.log python3 -m pytest -q -rs tests/gpu
  check "bench 0.6b" bench_0.6b.log \
    python3 -m qtts bench --size 0.6b --batch-sizes 1,16,64,128,256 --frames 128 --compare
  check "bench 1.7b" bench_1.7b.log \
    python3 -m qtts bench --size 1.7b --batch-sizes 1,16,64,128,256 --frames 128 --compare
  # Before the fused layer ops: the same bench on the module path, for the before/after figure.
  check "bench 0.6b module path" bench_0.6b_module.log \
    env QTTS_LAYER_PATH=module python3 -m qtts bench --size 0.6b --batch-sizes 64,256 --frames 128
  check "launch count" launches.log \
    python3 -m qtts bench --size 0.6b --count-launches --batch-sizes 64,256
  if ((${#failed[@]})); then
    echo "failed: ${failed[*]}" | tee -a "$OUT/summary.txt"
    exit 1
  fi
  ;;
*)
  echo "usage: bash tools/gpu_checks.sh prepare|run" >&2
  exit 2
  ;;
esac
