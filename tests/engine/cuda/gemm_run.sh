#!/bin/bash
# The 64-token GEMM on the GPU machine: the wgmma/mma.sync probe, the GEMV tests (GEMM rows bitwise against the
# m = 1 GEMV), GEMV speed at 64 and 256 rows per variant of gemv_speed.py flags, then (BENCH=1) the engine tests
# and `qtui bench --profile` on the 4b preset.
#   SPEED="gemm: old:--gemm-min-rows=1000000 c4:--gemm-cluster=4" bash tests/engine/cuda/gemm_run.sh [pytest -k expr]
source tests/engine/cuda/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
(cd tests/engine/cuda/probe && timeout 60 python3 wgmma_probe.py "$RANDOM") > "$OUT/probe.txt" 2>&1; tail -1 "$OUT/probe.txt"
T="python3 -m pytest -m gpu -q -x -p no:cacheprovider"
timeout ${T_TESTS:-200} $T tests/engine/cuda/test_gemv.py ${1:+-k "$1"} > "$OUT/gemv-tests.log" 2>&1
tail -2 "$OUT/gemv-tests.log"
for spec in ${SPEED:-gemm: old:--gemm-min-rows=1000000}; do
  v=${spec%%:*}; flags=${spec#*:}
  timeout 120 python3 tests/engine/cuda/gemv_speed.py --rows ${ROWS:-64,256} ${flags//,/ } --json "$OUT/speed-$v.json" \
    > "$OUT/speed-$v.txt" 2>&1
  echo "== $v $flags"; grep -E "^(gdn|attn|ffn|ssm|lm|stream)" "$OUT/speed-$v.txt" | cut -c1-22,60-
done
if [ "${BENCH:-0}" = 1 ]; then
  timeout 230 $T tests/engine/cuda/test_batch_invariance.py tests/engine/cuda/test_prefill.py \
    tests/engine/cuda/test_layers.py > "$OUT/engine.log" 2>&1; tail -1 "$OUT/engine.log"
  python3 -c "from qtui.model.synthetic import write_model; write_model('/tmp/4b.gguf', '4b', 'q4_k_m', seed=0, progress=False)"
  timeout 200 python3 -m qtui bench /tmp/4b.gguf --engine cuda --profile ${BENCH_ARGS:---ladder 1,16,32,64} --json \
    > "$OUT/bench-4b.json" 2> "$OUT/bench-4b.err"
  python3 -c "import json, sys; from qtui.tools import bench; print(bench.format_table(json.load(open(sys.argv[1]))))" \
    "$OUT/bench-4b.json" 2>&1 | head -16 || tail -20 "$OUT/bench-4b.err"
fi
