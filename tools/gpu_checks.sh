#!/usr/bin/env bash
# Every GPU check in one call, for a session that is lent a GPU machine (device tool).
#
#   bash tools/gpu_checks.sh prepare   # here, once: wheels the GPU image lacks -> .whl/
#                                      # (and `echo /.whl/ >> .git/info/exclude`)
#   bash tools/gpu_checks.sh run       # on the GPU machine (device tool, carry [".whl"]):
#                                      # qtts doctor, qtts bench 0.6b and 1.7b, tests/gpu,
#                                      # logs in $OUT (about 7 minutes)
#   bash tools/gpu_checks.sh loop      # on the GPU machine: the decode loop at batch 64 and 256
#                                      # with and without the vocoder beside it (about 3 minutes)
#   bash tools/gpu_checks.sh vocoder   # on the GPU machine: tools/vocoder_probe.py, where the
#                                      # speech decoder's time goes (about 2 minutes)
#   bash tools/gpu_checks.sh issue39   # on the GPU machine: the decoder probe, the real job
#                                      # (tools/job_check.py) and the peers side by side
#                                      # (tools/peers_bench.py), each with its own limit, in at
#                                      # most 9 minutes: device timeout_s 560, carry [".whl"]
#   bash tools/gpu_checks.sh decoder   # on the GPU machine: the decoder's GPU tests, the bench's
#                                      # steady state at batch 256 (0.6b with and without the
#                                      # vocoder, without the priority stream, 1.7b): at most
#                                      # 520 s of limits, device timeout_s 590; with issue39 in
#                                      # the same 15 minutes there is no room for a rerun
#   bash tools/gpu_checks.sh job       # the real job against the bench (tools/job_check.py)
#   bash tools/gpu_checks.sh peers     # the peers side by side (tools/peers_bench.py)
#   bash tools/gpu_checks.sh first     # a fresh session's one call (issue: the product at the
#                                      # card's speed): the real job against the bench on 2,048
#                                      # rows (WAV files and WebDataset, each run 55 s, each
#                                      # summary's time split), the peers on 128 rows with and
#                                      # without their warm-ups, the steady bench at 256 (0.6b,
#                                      # 1.7b), one decode step profiled at 256 slots (525 s of
#                                      # limits, device timeout_s 590)
#   bash tools/gpu_checks.sh second    # its follow-up on the warm machine: the FLAC job, the
#                                      # steady bench with the decoder's convolutions timed on
#                                      # the card, the start-up with the vocoder's graphs as
#                                      # first met, ahead and capped, the decoder probe,
#                                      # tests/gpu (270 s of limits, device timeout_s 290)
#   bash tools/gpu_checks.sh startup   # the start-up alone: a 128-row job with the vocoder's
#                                      # graphs captured as first met, captured ahead, and only
#                                      # below QTTS_VOCODER_GRAPH_MAX rows x frames
#   bash tools/gpu_checks.sh overlap   # the steady bench with the vocoder on all SMs (0: no split,
#                                      # the baseline), 66 and 33 SMs
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

finish() {  # every check has run: exit 1 if any failed
  if ((${#failed[@]})); then
    echo "failed: ${failed[*]}" | tee -a "$OUT/summary.txt"
    exit 1
  fi
}

setup() {  # $OUT, the missing wheels, the package on PYTHONPATH, the card's name
  OUT="${OUT:-/tmp/qtts-gpu}"
  mkdir -p "$OUT"
  : > "$OUT/summary.txt"
  export PYTHONUNBUFFERED=1
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl
  fi
  # The package by the layout pyproject.toml maps (qtts = pkg/, qtts.cli = cli/, ...), without
  # pip: the GPU image's setuptools may predate what pyproject.toml's metadata needs.
  rm -rf /tmp/qtts-src && mkdir -p /tmp/qtts-src/qtts
  cp pkg/*.py /tmp/qtts-src/qtts/
  for sub in cli core kernels; do ln -s "$PWD/$sub" "/tmp/qtts-src/qtts/$sub"; done
  export PYTHONPATH="/tmp/qtts-src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
    | tee -a "$OUT/gpu.txt"
}

job_run() {  # LIMIT [PER_RUN [RUNS]]: the real job against the bench on the same rows
  # The checkpoint, a warm-up bench (64 rows), the bench and three jobs, each run limited;
  # job_check.json is rewritten after every run, so a run cut off still leaves the ones before
  # it, and a job cut off leaves its last progress line (logged every 5 s).
  check "job vs bench 0.6b" job_check.log timeout -k 5 "$1" \
    python3 tools/job_check.py /tmp/job_check --rows 2048 --warmup-rows 64 \
      --timeout "${2:-55}" --ckpt-timeout 70 --runs "${3:-warmup,bench,files,flac,webdataset}"
  cp /tmp/job_check/job_check.json "$OUT/" 2>/dev/null || true
  tail -n 15 /tmp/job_check/job_check_*.log > "$OUT/job_runs.log" 2>/dev/null || true
}

join_off_bench() {  # LIMIT: the same rows' bench with each row in its own vocoder bucket
  # The frame budgets job_run's runs had: automatic, or the fixed one its warm-up fell back to.
  local budget
  budget=$(python3 -c "import json; print(json.load(open('/tmp/job_check/job_check.json'))\
['max_new_tokens'])" 2>/dev/null || echo auto)
  local fixed=()
  [[ $budget =~ ^[0-9]+$ ]] && fixed=(--max-new-tokens "$budget")
  check "bench on the job's rows, QTTS_VOCODER_JOIN=0" join_off.log timeout -k 5 "$1" \
    env QTTS_VOCODER_JOIN=0 python3 tools/job_check.py /tmp/job_check_join_off --rows 2048 \
      --runs bench --checkpoint /tmp/qtts-job-check/ckpt-0.6b --timeout "$(($1 - 5))" \
      "${fixed[@]}"
  cp /tmp/job_check_join_off/job_check.json "$OUT/job_check_join_off.json" 2>/dev/null || true
}

peers_run() {  # LIMIT seconds: the official code, both faster peers and qtts on one card
  check "peers 0.6b" peers.log timeout -k 5 "$1" \
    python3 tools/peers_bench.py all --out /tmp/peers --size 0.6b --rows 128 --frames 128 \
      --budget "$(($1 - 8))"
}

overlap_bench() {  # LIMIT SMS...: the steady bench, the vocoder on a green context of SMS SMs (0: none)
  local sms
  for sms in "${@:2}"; do
    check "bench 0.6b 256 x 8 passes, QTTS_VOCODER_SMS=$sms" "bench_sms${sms}.log" \
      timeout -k 5 "$1" env QTTS_VOCODER_SMS="$sms" python3 -m qtts bench --size 0.6b \
        --batch-sizes 256 --frames 128 --passes 8
  done
}

flac_job() {  # LIMIT: the FLAC job on job_run's rows and checkpoint
  check "job --format flac on the job's rows" flac_job.log timeout -k 5 "$1" \
    python3 tools/job_check.py /tmp/job_check_flac --rows 2048 --runs flac \
      --checkpoint /tmp/qtts-job-check/ckpt-0.6b --timeout "$(($1 - 5))"
  cp /tmp/job_check_flac/job_check.json "$OUT/job_check_flac.json" 2>/dev/null || true
}

steady_bench() {  # LIMIT: the bench's steady state at batch 256, with and without the vocoder
  for vocoder in --vocoder --no-vocoder; do
    check "bench 0.6b 256 x 8 passes $vocoder" "bench_0.6b${vocoder}.log" timeout -k 5 "$1" \
      python3 -m qtts bench --size 0.6b --batch-sizes 256 --frames 128 --passes 8 "$vocoder"
  done
}

steady_bench_with_vocoder() {  # SIZE LIMIT: the bench's steady state at batch 256, 8 passes
  check "bench $1 256 x 8 passes" "bench_$1_256.log" timeout -k 5 "$2" \
    python3 -m qtts bench --size "$1" --batch-sizes 256 --frames 128 --passes 8
}

startup_runs() {  # LIMIT: a 128-row job's one-time work, the vocoder's graphs three ways
  # Each a fresh process on job_run's checkpoint (or its own), whose summary's time split says
  # what it spent before its first decode step: graphs captured as first met (the default),
  # all ahead (before: ~130 window shapes), and only windows of at most 512 rows x frames.
  # After `first` (its checkpoint made, Triton's kernels in its on-disk cache); alone, the
  # first way pays the checkpoint and the kernel compiles.
  local each=$(($1 / 3)) way ckpt=()
  [[ -d /tmp/qtts-job-check/ckpt-0.6b ]] && ckpt=(--checkpoint /tmp/qtts-job-check/ckpt-0.6b)
  for way in lazy ahead graph_max; do
    local env=(QTTS_VOCODER_CAPTURE=lazy)
    [[ $way == ahead ]] && env=(QTTS_VOCODER_CAPTURE=ahead)
    [[ $way == graph_max ]] && env+=(QTTS_VOCODER_GRAPH_MAX=512)
    check "128-row job, vocoder graphs $way" "startup_$way.log" timeout -k 5 "$each" \
      env "${env[@]}" python3 tools/job_check.py "/tmp/startup_$way" --rows 128 --runs files \
        "${ckpt[@]}" --timeout "$((each - 5))"
    cp "/tmp/startup_$way/job_check.json" "$OUT/startup_$way.json" 2>/dev/null || true
  done
}

case "${1:-run}" in
prepare)
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl soundfile cffi pycparser soxr
  bash tools/peers_prepare.sh  # the peers' wheels, in .whl/peers/ (not installed by setup)
  ;;
run)
  setup
  # Each check has its own time limit so one hang cannot eat the device time of the rest; the
  # figures that matter most run first. On the first H200 (2026-11-25) the checks took about 85 s
  # (doctor), 55 s (each bench), 65 s (compare) and 135 s (tests/gpu), about 400 s in all, under
  # limits that add up to 710 s: call the device tool with timeout_s 560 (a hang cuts the last
  # checks), inside a session's 15 minutes with room to rerun.
  check "doctor 0.6b" doctor_0.6b.log timeout -k 5 150 python3 -m qtts doctor --size 0.6b
  check "bench 0.6b" bench_0.6b.log timeout -k 5 120 \
    python3 -m qtts bench --size 0.6b --batch-sizes 1,64,256 --frames 128
  check "bench 1.7b" bench_1.7b.log timeout -k 5 120 \
    python3 -m qtts bench --size 1.7b --batch-sizes 1,64,256 --frames 128
  # Eager decoding is launch-bound (~100-150 ms a step): one batch size is enough for the ratio.
  check "graph vs eager 0.6b" compare_0.6b.log timeout -k 5 120 \
    python3 -m qtts bench --size 0.6b --batch-sizes 64 --frames 128 --compare
  check "tests/gpu" gpu_tests.log timeout -k 5 200 \
    python3 -m pytest -q -rs -p no:cacheprovider --durations=10 tests/gpu
  finish
  ;;
loop)
  # Where a step's time goes between one graph replay and the loop: the same bench with the
  # vocoder beside the loop (as a job) and without it.
  setup
  for size in 0.6b 1.7b; do
    for vocoder in --vocoder --no-vocoder; do
      check "loop $size $vocoder" "loop_${size}${vocoder}.log" timeout -k 5 120 \
        python3 -m qtts bench --size "$size" --batch-sizes 64,256 --frames 128 "$vocoder"
    done
  done
  finish
  ;;
vocoder)
  setup
  for rows in 8 32; do
    check "vocoder probe $rows rows" "vocoder_${rows}.log" timeout -k 5 150 \
      python3 tools/vocoder_probe.py --size 0.6b --rows "$rows"
  done
  finish
  ;;
issue39)
  # One call for every figure of the speech-decoder, job and peers issue, the most important
  # first, each with its own limit: at most 15 + 60 + 230 + 230 = 535 s (device timeout_s 560).
  setup
  check "vocoder probe" probe.log timeout -k 5 60 \
    python3 tools/vocoder_probe.py --size 0.6b --rows 8
  job_run 230
  peers_run 230
  finish
  ;;
job)
  setup
  job_run 300
  finish
  ;;
peers)
  setup
  peers_run 300
  finish
  ;;
first)
  # A fresh session's one call (device timeout_s 590) for the product at the card's speed, the
  # most important figures first, each under its own limit: 210 + 180 + 55 + 35 + 45 = 525 s
  # at most, setup about 15 s more. Within 210 s: the checkpoint (about 20 s, at most 70), the
  # warm-up (64 rows), the bench on 2,048 rows and two jobs, each run 55 s. The peers: qtts,
  # faster-qwen3-tts-batch and the official code (the single-row peer's figure is known).
  setup
  job_run 210 55 warmup,bench,files,webdataset
  check "peers 0.6b" peers.log timeout -k 5 180 \
    python3 tools/peers_bench.py all --out /tmp/peers --size 0.6b --rows 128 --frames 128 \
      --systems qtts,faster_batch,official --kinds base --budget 172
  cp /tmp/peers/peers.json "$OUT/" 2>/dev/null || true
  steady_bench_with_vocoder 0.6b 55
  check "decode step profile 0.6b at 256 slots" step_profile.log timeout -k 5 35 \
    python3 tools/step_profile.py --size 0.6b --slots 256
  steady_bench_with_vocoder 1.7b 45
  finish
  ;;
second)
  # After `first`, on the same warm machine (its checkpoint and rows in /tmp): 50 + 55 + 75 +
  # 30 + 60 = 270 s of limits (device timeout_s 290): the FLAC job, the steady bench with each
  # decoder convolution timed on the card (QTTS_DECODER_CONVS=timed; this process times, the
  # choices kept in $QTTS_CACHE_DIR), the start-up three ways, the decoder probe, tests/gpu.
  setup
  flac_job 50
  check "bench 0.6b 256 x 8 passes, convolutions timed" bench_timed_convs.log \
    timeout -k 5 55 env QTTS_DECODER_CONVS=timed QTTS_CACHE_DIR=/tmp/qtts-cache \
      python3 -m qtts bench --size 0.6b --batch-sizes 256 --frames 128 --passes 8
  cp /tmp/qtts-cache/conv_choices.json "$OUT/" 2>/dev/null || true
  startup_runs 75
  check "vocoder probe" probe.log timeout -k 5 30 \
    python3 tools/vocoder_probe.py --size 0.6b --rows 8
  check "tests/gpu" gpu_tests.log timeout -k 5 60 \
    python3 -m pytest -q -rs -p no:cacheprovider --durations=10 tests/gpu
  finish
  ;;
startup)
  setup
  startup_runs 150
  finish
  ;;
overlap)
  setup
  overlap_bench 75 0 66 33  # 0: no split (asking for every SM may make no group at all)
  finish
  ;;
decoder)
  # The speech decoder and the decode loop beside it: the fast path's GPU tests, then the
  # bench's steady state at batch 256 (8 passes) with the vocoder beside the loop, without it,
  # and without the decode stream's priority (QTTS_DECODE_PRIORITY=0), then 1.7b.
  setup
  check "decoder fast path on the GPU" gpu_decoder.log timeout -k 5 120 \
    python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_decoder_fast_path_gpu.py \
      tests/gpu/test_decode_priority_gpu.py tests/gpu/test_snake_beta_gpu.py \
      tests/gpu/test_vocoder_gpu.py
  steady_bench 100
  check "bench 0.6b 256 x 8 passes, no priority" bench_0.6b_flat.log timeout -k 5 100 \
    env QTTS_DECODE_PRIORITY=0 python3 -m qtts bench --size 0.6b --batch-sizes 256 \
      --frames 128 --passes 8
  check "bench 1.7b 256 x 8 passes" bench_1.7b.log timeout -k 5 100 \
    python3 -m qtts bench --size 1.7b --batch-sizes 256 --frames 128 --passes 8
  finish
  ;;
*)
  echo "usage: bash tools/gpu_checks.sh prepare|run|loop|vocoder|issue39|job|peers|decoder|first|second|startup|overlap" >&2
  exit 2
  ;;
esac
