#!/bin/bash
# What bounds the 64-token GEMM (not a test: a device-side reading aid for ptx/PERF.md). Build here, each variant
# of ptx/gemm.cuh's bottleneck probes into .ptxvar/<v> (q4_k and q6_k modules: timing only, wrong sums):
#   for v in X_ONCE W_ONCE NO_SCALE; do d=.ptxvar/$(echo $v | tr A-Z_ a-z-); mkdir -p $d
#     for t in q4_k q6_k; do nvcc -ptx -arch=sm_90a -O3 -std=c++17 -DGEMM_PROBE_$v -I ptx ptx/gemv_$t.cu -o $d/gemv_$t.ptx; done; done
# then on the GPU machine: bash tests/engine/cuda/probe/gemm_bottleneck.sh [rows]. One gemv_speed table per
# variant under $OUT, and the GEMM launches' times side by side.
source tests/engine/cuda/gpu_env.sh
ROWS=${1:-64,256}
for v in base x-once w-once no-scale; do
  dir=.ptxvar/$v; [ $v = base ] && dir=ptx
  QTUI_PTX_DIR=$dir python3 tests/engine/cuda/gemv_speed.py --rows "$ROWS" --json "$OUT/bottleneck-$v.json" \
    > "$OUT/bottleneck-$v.txt" 2>&1 || { echo "# $v failed"; tail -5 "$OUT/bottleneck-$v.txt"; }
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
vs = [v for v in ("base", "x-once", "w-once", "no-scale") if os.path.exists(f"{out}/bottleneck-{v}.json")]
tabs = {v: {(r["matrix"], r["m"]): r["us"] for r in json.load(open(f"{out}/bottleneck-{v}.json"))["rows"]} for v in vs}
print(f"{'matrix':20} {'m':>4} " + " ".join(f"{v:>9}" for v in vs) + "   (us per launch, stager included)")
for key in tabs["base"]:
    print(f"{key[0]:20} {key[1]:4d} " + " ".join(f"{tabs[v].get(key, float('nan')):9.1f}" for v in vs))
PY
