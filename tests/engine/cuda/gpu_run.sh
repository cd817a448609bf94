#!/bin/bash
# One device-machine run: environment line, GPU tests, then the benchmark on synthetic 0.8b / 4b files.
#   usage (on the GPU machine, repo root): bash tests/engine/cuda/gpu_run.sh "<pytest -k/-m extra>" "<bench presets>"
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "base commit ${QTUI_COMMIT:-unknown} (working tree with uncommitted changes: ${QTUI_DIRTY:-unknown})"
  python3 -c "import cuda.bindings, numpy; print('cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"
} 2>&1 | tee "$OUT/env.txt"
MARK=${1:-"gpu and not slow"}
timeout ${T_TESTS:-330} python3 -m pytest -m "$MARK" tests/engine/cuda -q -rA -p no:cacheprovider 2>&1 | tee "$OUT/gpu.log" | grep -v "^PASSED"
for preset in ${2:-}; do
  python3 -c "from qtui.model.synthetic import write_model; write_model('/tmp/$preset.gguf', '$preset', 'q4_k_m', progress=False)"
  timeout ${T_BENCH:-150} python3 -c "import argparse, sys; from qtui.tools import bench
p = argparse.ArgumentParser(); bench.add_arguments(p); sys.exit(bench.run(p.parse_args(sys.argv[1:])))" \
    /tmp/$preset.gguf --json $BENCH_ARGS > "$OUT/bench-$preset.json" 2> "$OUT/bench-$preset.err"
  python3 -c "import json, sys; from qtui.tools import bench; print(bench.format_table(json.load(open(sys.argv[1]))))" \
    "$OUT/bench-$preset.json" 2>&1 | tee "$OUT/bench-$preset.txt" || tail -5 "$OUT/bench-$preset.err"
done
