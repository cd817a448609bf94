#!/bin/bash
# One GPU call (~5 min, repo root) for batched prefill (CudaEngine.prefill_batch, ptx/PERF.md session 21) and the
# owed GPU tests:   QTUI_COMMIT=<sha> [V="half16"] [LIMIT=480] [T_TESTS=210] [TEST_PATHS=tests/engine/cuda]
#                   bash tests/engine/cuda/batch_prefill_run.sh
# 1. the GPU tests in TEST_PATHS, in that order (a short call: test_prefill.py first, its prefill_batch tests);
# 2. the 4b bench, ladder 1,16,64 with the burst row (one prefill call each vs prefill_batch), against the variant
#    builds in V (.ptxvar/<v>: bash tests/engine/cuda/probe/wg_lag_run.sh build), via ab_run.sh;
# 3. the parity ladder 1,16,64 and the load rows through qtui serve with QTUI_BATCH_PREFILL=1 (the scheduler's
#    batched path: the ladder's 64 prompts arrive at once), the witness JSONs in $OUT/ladder.tgz.
source tests/engine/cuda/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "commit ${QTUI_COMMIT:-unknown}" | tee -a "$OUT/gpu.txt"
timeout ${T_TESTS:-210} python3 -m pytest -m gpu -q -rA -p no:cacheprovider ${TEST_PATHS:-tests/engine/cuda} > "$OUT/gpu-tests.txt" 2>&1
echo "## tests done at ${SECONDS}s"; tail -1 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -8
grep -E "prefill_batch" "$OUT/gpu-tests.txt" | grep -cE "^PASSED" | sed 's/^/prefill_batch tests passed: /'
T_AB=$((${LIMIT:-480} - 190 - SECONDS))  # (timeout 0 would mean none: a short call skips the bench instead)
[ $T_AB -ge 30 ] && T_BENCH=80 timeout $T_AB bash tests/engine/cuda/ab_run.sh "${V:-}" 4b \
  "--ladder 1,16,64 --long-prompt 0 --steps 32" > "$OUT/ab.log" 2>&1
rm -f "$OUT"/*.err
echo "## bench done at ${SECONDS}s"
grep -E "^[A-I] =|single|aggregate|prefill 512|burst|m=64 step: (whole|mma|delta|gemm_fold)" "$OUT/ab-4b.txt" | cut -c1-200
W=/tmp/lad; mkdir -p $W
T_LAD=$((${LIMIT:-480} - 15 - SECONDS))
[ $T_LAD -ge 30 ] && QTUI_BATCH_PREFILL=1 OUT=$W SAMPLED=0 LADDER=1,16,64 T_LADDER=100 timeout $T_LAD \
  bash tests/engine/cuda/ladder_run.sh 4b > "$W/ladders.log" 2>&1
tar -czf "$OUT/ladder.tgz" -C /tmp lad
echo "## ladder done at ${SECONDS}s"; tail -8 $W/ladder-4b.txt
for f in $W/load*.json; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: v for k, v in r.items() if not isinstance(v, (list, dict))})" "$f" 2>&1 | tail -c 700
done
