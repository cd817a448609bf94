#!/bin/bash
# The 64-token GEMM on the GPU machine: the wgmma/mma.sync probe, the GEMV tests (GEMM rows bitwise against the
# m = 1 GEMV), then GEMV speed at 64 and 256 rows with the GEMM and without it (GEMM_MIN_ROWS off).
#   bash tests/engine/cuda/gemm_run.sh [pytest -k expression]
source tests/engine/cuda/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
(cd tests/engine/cuda/probe && timeout 60 python3 wgmma_probe.py "$RANDOM") > "$OUT/probe.txt" 2>&1; tail -1 "$OUT/probe.txt"
timeout ${T_TESTS:-200} python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/engine/cuda/test_gemv.py ${1:+-k "$1"} \
  > "$OUT/gemv-tests.log" 2>&1; tail -4 "$OUT/gemv-tests.log"
for v in gemm old; do
  extra=(); [ "$v" = old ] && extra=(--gemm-min-rows 1000000)
  timeout 120 python3 tests/engine/cuda/gemv_speed.py --rows ${ROWS:-64,256} "${extra[@]}" --json "$OUT/speed-$v.json" \
    > "$OUT/speed-$v.txt" 2>&1
  echo "== $v"; grep -E "^(gdn|attn|ffn|ssm|lm|stream)" "$OUT/speed-$v.txt"
done
