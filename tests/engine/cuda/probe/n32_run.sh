#!/bin/bash
# Judge branch gemm-n32 (the GEMM's 32-token form) and time the cut-tail probes, in one GPU call (ptx/PERF.md,
# session 9). Here, on the branch's tree:   bash tests/engine/cuda/probe/n32_run.sh build
# (the probe kernels into .ptxvar/nofold and .ptxvar/nocut, which travel with the tree); there:
#   bash tests/engine/cuda/probe/n32_run.sh
set -o pipefail
if [ "$1" = build ]; then
  for v in nofold:GEMM_PROBE_NO_FOLD nocut:GEMM_PROBE_NO_CUT; do
    rm -rf ".ptxvar/${v%%:*}"; mkdir -p ".ptxvar/${v%%:*}"
    for t in q4_k q6_k; do
      nvcc -ptx -arch=sm_90a -O3 -std=c++17 -I ptx "-D${v#*:}" "ptx/gemv_$t.cu" -o ".ptxvar/${v%%:*}/gemv_$t.ptx" || exit 1
    done
  done
  exit 0
fi
source tests/engine/cuda/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 230 python3 -m pytest -m gpu tests/engine/cuda -q -x -p no:cacheprovider > "$OUT/n32-gpu-tests.log" 2>&1
tail -2 "$OUT/n32-gpu-tests.log"
# A = the branch (17..32-row GEMMs in the 32-token form), B = the same with it off (main's behaviour), C / D = the
# probes (wrong sums: only their m = 64 step times mean anything)
T_BENCH=90 bash tests/engine/cuda/ab_run.sh "QTUI_GEMM_NARROW_ROWS=0 nofold nocut" 4b \
  "--ladder 16,24,32,64 --long-prompt 0 --steps 32" > "$OUT/n32-ab.txt" 2>&1
grep -E "^[A-D] =|aggregate|m=64 step: (whole|mma)" "$OUT/n32-ab.txt"
