#!/bin/bash
# The warpgroup lag (ptx/gemm.cuh GEMM_WG_LAG, GEMM_EARLY_RELEASE; ptx/PERF.md session 17) tuned and taken to the
# H200, in one GPU call. Here:   bash tests/engine/cuda/probe/wg_lag_run.sh build
# (the variant kernels into .ptxvar/, which travels with the tree); there:   bash tests/engine/cuda/probe/wg_lag_run.sh
# TESTS=1 runs every GPU test first; with it, at most four variants (V="...") fit one 10-minute call (~35 s each).
# Variants (q4_k and q6_k modules; the committed ptx/ is A = 8 sleeps with the early release):
#   nolag   today's kernels without the lag and the early release (GEMM_WG_LAG 0, GEMM_EARLY_RELEASE 0): the H200's
#           before/after (a3180b5's PTX no longer fits the host: the GEMM takes its pair place since session 18)
#   er4 er6 4 and 6 sleeps             er8m4 er8m6  8 sleeps only in blocks of >= 4 / 6 units (GEMM_PROBE_LAG_MIN_UNITS)
#   fi2     8 sleeps and two slice pairs in flight beyond the newest (GEMM_FOLD_INFLIGHT 2: the warpgroups apart now)
#   half8 half16 half24   a stage's halves released apart (GEMM_HALF_RELEASE 1, session 19) with 8, 16, 24 sleeps:
#           the lag may then reach about a unit; half16m4: 16 sleeps only in blocks of >= 4 units (the sleep is paid once
#           a launch, the gain once a unit: the LM head's blocks walk ~150 units, ssm out's 2 - 3)
#   dcopy   (H200 only) the delta rule's state stream without its arithmetic (DELTA_PROBE_COPY; wrong outputs)
#   dlag    (H200 only) the delta rule with its odd blocks 16 sleeps late (DELTA_PROBE_BLOCK_LAG: the 132 blocks'
#           streams out of step; the same outputs)
# Then the delta rule's timeline inside a step (probe/delta_trace.py; dtrace, and on an H200 dtcopy: the stream alone).
set -o pipefail
if [ "$1" = build ]; then
  build() {  # name, then nvcc defines
    local name=$1; shift; rm -rf ".ptxvar/$name"; mkdir -p ".ptxvar/$name"
    for t in q4_k q6_k; do
      nvcc -ptx -arch=sm_90a -O3 -std=c++17 -I ptx "$@" "ptx/gemv_$t.cu" -o ".ptxvar/$name/gemv_$t.ptx" || exit 1
    done
  }
  rm -rf .ptxvar/main
  build nolag -DGEMM_WG_LAG=0 -DGEMM_EARLY_RELEASE=0
  build er4 -DGEMM_WG_LAG=4; build er6 -DGEMM_WG_LAG=6
  build er8m4 -DGEMM_PROBE_LAG_MIN_UNITS=4; build er8m6 -DGEMM_PROBE_LAG_MIN_UNITS=6
  build fi2 -DGEMM_FOLD_INFLIGHT=2
  for lag in 8 16 24; do build half$lag -DGEMM_HALF_RELEASE=1 -DGEMM_WG_LAG=$lag; done
  build half16m4 -DGEMM_HALF_RELEASE=1 -DGEMM_WG_LAG=16 -DGEMM_PROBE_LAG_MIN_UNITS=4
  for v in dcopy:-DDELTA_PROBE_COPY dlag:-DDELTA_PROBE_BLOCK_LAG=16 dtrace:-DDELTA_TRACE \
           dtcopy:"-DDELTA_TRACE -DDELTA_PROBE_COPY"; do  # name:defines (the delta rule's module)
    rm -rf ".ptxvar/${v%%:*}"; mkdir -p ".ptxvar/${v%%:*}"
    nvcc -ptx -arch=sm_90a -O3 -std=c++17 -I ptx ${v#*:} ptx/deltanet.cu -o ".ptxvar/${v%%:*}/deltanet.ptx" || exit 1
  done
  exit 0
fi
source tests/engine/cuda/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
if [ -n "$TESTS" ]; then  # TESTS=1: every GPU test on the committed ptx/ first (its witness: $OUT/gpu-tests.txt)
  timeout ${T_TESTS:-230} python3 -m pytest -m gpu -q -p no:cacheprovider tests/engine/cuda > "$OUT/gpu-tests.txt" 2>&1
  echo "## GPU tests done at ${SECONDS}s"; tail -1 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -5
fi
V=${V:-nolag half8 half16 half24 half16m4 er8m4}  # (V=...: a shorter list for a short call; dcopy dlag are added on an H200)
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && V="$V dcopy dlag"
T_BENCH=90 timeout ${T_AB:-$((530 - SECONDS))} bash tests/engine/cuda/ab_run.sh "$V" 4b "--ladder 1,16,64 --long-prompt 0 --steps 32" \
  > "$OUT/wg-lag-ab.log" 2>&1
rm -f "$OUT"/*.err
grep -E "^[A-I] =|single|aggregate|prefill 512|m=64 step: (whole|mma|delta)" "$OUT/ab-4b.txt" | cut -c1-220
source tests/engine/cuda/model_spec.sh; model_spec 4b
T=dtrace; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && T="dtrace dtcopy"
for v in $T; do
  echo "## delta timeline, $v"; QTUI_PTX_DIR=.ptxvar/$v timeout 40 python3 tests/engine/cuda/probe/delta_trace.py "$GGUF" 2>&1 | tail -13
done
