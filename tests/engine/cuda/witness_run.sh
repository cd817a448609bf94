#!/bin/bash
# One witness run on the GPU machine (repo root): every GPU test, GEMV speed, qtui bench on the 4b and 0.8b
# presets, the parity ladders through qtui serve. Everything lands in $OUT/witness.tgz; the tables print last.
#   QTUI_COMMIT=<sha> bash tests/engine/cuda/witness_run.sh "<bench presets>" "<ladder presets>"
# A preset is NAME or NAME:QUANT (default q4_k_m), e.g. "4b 4b:q3_k_m 27b"; its files are tagged NAME resp.
# NAME-QUANT. T_TESTS=0 skips the GPU tests, SPEED=0 the GEMV speed table.
source tests/engine/cuda/gpu_env.sh
W=/tmp/witness; mkdir -p "$W"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "commit ${QTUI_COMMIT:-unknown}"
  python3 -c "import cuda.bindings, numpy; print('cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"
} 2>&1 | tee "$W/env.txt"
if [ "${T_TESTS:-200}" != 0 ]; then
  timeout ${T_TESTS:-200} python3 -m pytest -m gpu tests/engine/cuda -q -rA -p no:cacheprovider > "$W/gpu-tests.log" 2>&1
  tail -3 "$W/gpu-tests.log"
fi
[ "${SPEED:-1}" != 0 ] && timeout 90 python3 tests/engine/cuda/gemv_speed.py --json "$W/gemv-speed.json" > "$W/gemv-speed.txt" 2>&1
for v in $VARIANTS; do  # comparison builds under .ptxvar/<v> (speed only)
  QTUI_PTX_DIR=.ptxvar/$v timeout 90 python3 tests/engine/cuda/gemv_speed.py --json "$W/gemv-speed-$v.json" \
    > "$W/gemv-speed-$v.txt" 2>&1
done
OUT=$W bash tests/engine/cuda/bench_run.sh "${1:-4b 0.8b}" \
  "--profile --max-context 4608 --long-prompt 4096 $BENCH_ARGS" > "$W/benches.log" 2>&1
OUT=$W bash tests/engine/cuda/ladder_run.sh "${2:-4b 0.8b}" > "$W/ladders.log" 2>&1
tar -czf "$OUT/witness.tgz" -C /tmp witness
for f in "$W"/gemv-speed*.txt; do echo "== $f"; grep -E "^(gdn|attn|ffn|ssm|lm|stream)" "$f" | cut -c1-22,55-; done
for f in "$W"/bench-*.txt "$W"/ladder-*.txt "$W"/info-*.txt; do echo "== $f"; cat "$f"; done
for f in "$W"/load*.json; do echo "== $f"; python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: v for k, v in r.items() if not isinstance(v, (list, dict))})" "$f" 2>&1 | tail -c 900; done
grep -E "passed|failed" "$W/gpu-tests.log" | tail -2
