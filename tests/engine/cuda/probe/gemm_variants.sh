#!/bin/bash
# The GEMM launches' time per variant build, side by side (not a test: a device-side reading aid for ptx/PERF.md).
# A variant is base (ptx/) or a build .ptxvar/<v>, optionally joined by + to the host settings it needs (as in
# ab_run.sh: occ2+QTUI_GEMM_STAGES=1+QTUI_GEMM_RESIDENT_BLOCKS=264). Build them here, e.g.
#   d=.ptxvar/occ2; mkdir -p $d; for t in q4_k q6_k; do
#     nvcc -ptx -arch=sm_90a -O3 -std=c++17 -DGEMM_STAGES=1 -DGEMM_MIN_BLOCKS=2 -I ptx ptx/gemv_$t.cu -o $d/gemv_$t.ptx; done
# then on the GPU machine: bash tests/engine/cuda/probe/gemm_variants.sh "<variants>" [rows]. One gemv_speed table
# per variant under $OUT (gemm-<v>.txt / .json), then the GEMM launches' us per launch, stager included.
source tests/engine/cuda/gpu_env.sh
ROWS=${2:-64,256}
names=()
for v in base $1; do
  IFS=+ read -r -a parts <<< "$v"
  dir=.ptxvar/${parts[0]}; [ "${parts[0]}" = base ] && dir=ptx
  name=${parts[0]}; [ ${#parts[@]} -gt 1 ] && name=$(IFS=+; echo "${parts[*]}" | tr -c 'A-Za-z0-9_.\n' '-')  # the device returns plain names only
  env QTUI_PTX_DIR=$dir "${parts[@]:1}" timeout ${T_SPEED:-240} python3 tests/engine/cuda/gemv_speed.py --rows "$ROWS" \
    --json "$OUT/gemm-$name.json" > "$OUT/gemm-$name.txt" 2>&1 && names+=("$name") \
    || { echo "# $v failed"; tail -5 "$OUT/gemm-$name.txt"; }
done
python3 - "$OUT" "${names[@]}" <<'PY'
import json, sys
out, vs = sys.argv[1], sys.argv[2:]
tabs = {v: {(r["matrix"], r["m"]): r["us"] for r in json.load(open(f"{out}/gemm-{v}.json"))["rows"]} for v in vs}
for i, v in enumerate(vs):
    print(f"  {chr(65 + i)} = {v}")
print(f"{'matrix':20} {'m':>4} " + " ".join(f"{chr(65 + i):>8}" for i in range(len(vs))) + "   (us per launch)")
for key in tabs[vs[0]]:
    print(f"{key[0]:20} {key[1]:4d} " + " ".join(f"{tabs[v].get(key, float('nan')):8.1f}" for v in vs))
PY
