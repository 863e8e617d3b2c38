#!/usr/bin/env bash
# Every GPU check in one call, for a session that is lent a GPU machine (device tool).
#
#   bash tools/gpu_checks.sh prepare   # here, once: wheels the GPU image lacks -> .whl/
#                                      # (and `echo /.whl/ >> .git/info/exclude`)
#   bash tools/gpu_checks.sh run       # on the GPU machine (device tool, carry [".whl"]):
#                                      # tests/gpu + qtts bench 0.6b and 1.7b, logs in $OUT
#
# The GPU image has torch, triton, transformers, pyarrow, typer, safetensors, tqdm, filelock and
# huggingface_hub; it lacks soundfile (+ cffi, pycparser) and soxr.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-run}" in
prepare)
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl soundfile cffi pycparser soxr
  ;;
run)
  OUT="${OUT:-/tmp/qtts-gpu}"
  mkdir -p "$OUT"
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  fi
  python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
  nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt"
  python3 -m pytest -q tests/gpu 2>&1 | tee "$OUT/gpu_tests.log"
  python3 -m qtts bench --size 0.6b --batch-sizes 1,16,64,128,256 --frames 128 --compare \
    2>&1 | tee "$OUT/bench_0.6b.log"
  python3 -m qtts bench --size 1.7b --batch-sizes 1,16,64,128,256 --frames 128 --compare \
    2>&1 | tee "$OUT/bench_1.7b.log"
  ;;
*)
  echo "usage: bash tools/gpu_checks.sh prepare|run" >&2
  exit 2
  ;;
esac
