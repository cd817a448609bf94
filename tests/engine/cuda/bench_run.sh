#!/bin/bash
# qtui bench (and `qtui info`) on synthetic files, on the GPU machine (repo root):
#   QTUI_COMMIT=<sha> bash tests/engine/cuda/bench_run.sh "<NAME[:QUANT] ...>" [bench args]
# e.g. "4b:q3_k_m 9b" "--ladder 1,4,8,16 --steps 32 --long-prompt 0". JSON + tables under $OUT; tables print.
source tests/engine/cuda/gpu_env.sh
source tests/engine/cuda/model_spec.sh
for spec in $1; do
  t0=$(date +%s); model_spec "$spec" || exit 1; echo "# $spec written in $(( $(date +%s) - t0 )) s"
  python3 -m qtui info "$GGUF" --max-slots 16 --max-context 2048 > "$OUT/info-$TAG.txt" 2>&1
  timeout ${T_BENCH:-150} python3 -m qtui bench "$GGUF" --engine cuda --json $2 > "$OUT/bench-$TAG.json" 2> "$OUT/bench-$TAG.err"
  python3 -c "import json, sys; from qtui.tools import bench; print(bench.format_table(json.load(open(sys.argv[1]))))" \
    "$OUT/bench-$TAG.json" > "$OUT/bench-$TAG.txt" 2>&1 || tail -5 "$OUT/bench-$TAG.err" > "$OUT/bench-$TAG.txt"
  echo "== $TAG (commit ${QTUI_COMMIT:-unknown})"; cat "$OUT/bench-$TAG.txt"
done
