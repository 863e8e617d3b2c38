#!/usr/bin/env bash
# One manifest, two backends, side by side: `qtts batch` local, then `--backend ray --workers 2`
# (a local Ray started by the job), timed in this one run, then a check that both wrote the same
# codes. The figure is Ray's overhead on a small job; expect no speedup on a 2-core CPU.
#
#   bash tools/ray_vs_local.sh [ROWS] [MAX_NEW_TOKENS]     (needs pip install -e ".[ray]")
set -euo pipefail
rows=${1:-24}
tokens=${2:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --no-eos-by-text: EOS never wins, so every row runs to MAX_NEW_TOKENS (fixed lengths)
python examples/make_tiny_checkpoint.py "$work/tiny" --preset small --seed 3 --no-eos-by-text \
  >/dev/null
python - "$work/manifest.parquet" "$rows" <<'EOF'
import sys
import pyarrow as pa, pyarrow.parquet as pq
path, n = sys.argv[1], int(sys.argv[2])
rows = [{"id": f"r{i:04d}", "text": f"Row {i}: a sentence of moderate length, spoken.", "seed": i}
        for i in range(n)]
pq.write_table(pa.Table.from_pylist(rows), path)
EOF

run() {  # backend label, extra flags...
  local label=$1; shift
  local start end
  start=$(date +%s.%N)
  qtts batch "$work/manifest.parquet" --model "$work/tiny" --out-dir "$work/$label" --device cpu \
    --max-new-tokens "$tokens" --speaker vivian --save-codes -q "$@" | tail -n 1 > "$work/$label.json"
  end=$(date +%s.%N)
  echo "$label $(echo "$end - $start" | bc)" >> "$work/times"
}
run local
run ray --backend ray --workers 2 --gpus-per-worker 0

python - "$work" "$(nproc)" <<'EOF'
import json, sys
from pathlib import Path
import numpy as np
work, cores = Path(sys.argv[1]), sys.argv[2]
times = dict(line.split() for line in (work / "times").read_text().splitlines())
report = {}
for label in ("local", "ray"):
    summary = json.loads((work / f"{label}.json").read_text())
    wall = float(times[label])
    report[label] = {"wall_s": round(wall, 2), "ok": summary["ok"], "failed": summary["failed"],
                     "audio_s": summary["audio_s"], "audio_s_per_s": round(summary["audio_s"] / wall, 3)}
codes = sorted(p.relative_to(work / "local") for p in (work / "local").rglob("*.npy"))
same = bool(codes) and all(np.array_equal(np.load(work / "local" / p), np.load(work / "ray" / p))
                           for p in codes)
report["same_codes"] = same
report["rows_compared"] = len(codes)
report["ray_overhead_s"] = round(report["ray"]["wall_s"] - report["local"]["wall_s"], 2)
report["cpu_cores"] = int(cores)
print(f"{'backend':8} {'wall s':>8} {'ok':>4} {'audio s/s':>10}")
for label in ("local", "ray"):
    r = report[label]
    print(f"{label:8} {r['wall_s']:8.2f} {r['ok']:4d} {r['audio_s_per_s']:10.3f}")
print(json.dumps(report))
EOF
