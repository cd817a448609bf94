#!/bin/bash
# Kernel development run on the GPU machine: kernel tests, GEMV tests + speed of PTX variants (.ptxvar/<v>),
# the engine tests, one bench.   bash tests/engine/cuda/dev_run.sh "<variants>" "<bench args>"
source tests/engine/cuda/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
T="python3 -m pytest -m gpu -q -p no:cacheprovider"
timeout 200 $T tests/engine/cuda/test_gemv.py tests/engine/cuda/test_layers.py tests/engine/cuda/test_sampling.py \
  2>&1 | tee "$OUT/kernels.log" | tail -4
for v in base $1; do
  dir=.ptxvar/$v; [ "$v" = base ] && dir=ptx
  [ "$v" != base ] && QTUI_PTX_DIR=$dir timeout 120 $T tests/engine/cuda/test_gemv.py -k "gemv or swiglu" 2>&1 \
    | tail -2 | sed "s/^/[$v tests] /"
  QTUI_PTX_DIR=$dir timeout 90 python3 tests/engine/cuda/gemv_speed.py --json "$OUT/speed-$v.json" > "$OUT/speed-$v.txt" 2>&1
  echo "== $v"; grep -E "^(gdn|attn|ffn|ssm|lm|stream)" "$OUT/speed-$v.txt" | awk '{print $0}' | cut -c1-20,22-24,60-
done
timeout 240 $T tests/engine/cuda/test_batch_invariance.py tests/engine/cuda/test_prefill.py tests/engine/cuda/test_engine.py \
  -k "not 0_8b" 2>&1 | tee "$OUT/engine.log" | tail -6
if [ -n "$2" ]; then
  python3 -c "from qtui.model.synthetic import write_model; write_model('/tmp/4b.gguf', '4b', 'q4_k_m', seed=0, progress=False)"
  timeout ${T_BENCH:-200} python3 -m qtui bench /tmp/4b.gguf $2 --json > "$OUT/bench-4b.json" 2> "$OUT/bench-4b.err"
  python3 -c "import json, sys; from qtui.tools import bench; print(bench.format_table(json.load(open(sys.argv[1]))))" \
    "$OUT/bench-4b.json" 2>&1 | tee "$OUT/bench-4b.txt" || tail -20 "$OUT/bench-4b.err"
fi
