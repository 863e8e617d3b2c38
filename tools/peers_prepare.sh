#!/usr/bin/env bash
# The wheels tools/peers_bench.py needs on the GPU image, downloaded here (once, with a package
# index) into .whl/peers/ for Python 3.12 manylinux x86_64. Run after `bash tools/gpu_checks.sh
# prepare` (soundfile, cffi, pycparser, soxr in .whl/); the device tool's carry [".whl"] takes both.
#
#   bash tools/peers_prepare.sh
#
# Two environments, because the peers' releases straddle transformers 4 and 5 and the GPU image's
# transformers 5.17 suits none of them (tools/peers/README.md says why):
#   .whl/peers/tf5/   the official qwen-tts-hf and faster-qwen3-tts 0.5.4, on transformers 5.15.1
#   .whl/peers/tf4/   faster-qwen3-tts-batch 0.2.0 with what it was written against: qwen-tts
#                     0.1.1, faster-qwen3-tts 0.3.2, transformers 4.57.3, huggingface-hub 0.36
#   .whl/peers/both/  tokenizers 0.22.2 (the image's 0.23 is newer than either transformers takes)
# tools/peers_bench.py installs both/ plus one of them into its own --target folder per
# environment; none of these go to /tmp/site, where they would shadow the image's transformers.
# Not carried (the peers import them at the top but the runs never call them): librosa,
# torchaudio, sox; tools/peers/stubs.py stands in for them.
set -euo pipefail
cd "$(dirname "$0")/.."

download() {  # download DEST SPEC...: binary wheels for the GPU image's Python, no dependencies
  local dest=$1
  shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$dest" "$@"
}

rm -rf .whl/peers
download .whl/peers/both tokenizers==0.22.2
download .whl/peers/tf5 transformers==5.15.1 qwen-tts-hf==0.1.1.post1 faster-qwen3-tts==0.5.4
download .whl/peers/tf4 transformers==4.57.3 huggingface-hub==0.36.2 qwen-tts==0.1.1 \
  faster-qwen3-tts==0.3.2 faster-qwen3-tts-batch==0.2.0 requests==2.32.5 urllib3==2.5.0 \
  idna==3.10 charset-normalizer==3.4.3 certifi==2025.10.5
ls -l .whl/peers/*/*.whl
echo "peers: $(du -cb .whl/peers/*/*.whl | tail -1 | cut -f1) bytes;" \
  "all carried wheels: $(du -cb $(find .whl -name '*.whl') | tail -1 | cut -f1) bytes" \
  "(the device tool carries 64 MiB = 67108864 bytes in all)"
