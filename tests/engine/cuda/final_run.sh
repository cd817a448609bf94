#!/bin/bash
# Short witness run (repo root, GPU machine): the GEMV and batch-invariance GPU tests, qtui bench on the 4b
# preset, and the qtui load rows through qtui serve (64 streaming clients; 63 while a 4000-token prompt arrives).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; W=/tmp/final; mkdir -p "$OUT" "$W"; PORT=8792
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "commit ${QTUI_COMMIT:-unknown}"; } > "$W/env.txt"
timeout 80 python3 -m pytest -m gpu tests/engine/cuda/test_gemv.py tests/engine/cuda/test_batch_invariance.py -q -rA \
  -p no:cacheprovider > "$W/gpu-tests.log" 2>&1; tail -1 "$W/gpu-tests.log"
python3 -m qtui make-model /tmp/4b.gguf --preset 4b --quant q4_k_m --seed 0 > /dev/null 2>&1
timeout 70 python3 -m qtui bench /tmp/4b.gguf --engine cuda --json --steps 32 --ladder 1,16,64 --long-prompt 0 \
  > "$W/bench-4b.json" 2> "$W/bench-4b.err"
python3 -c "import json, sys; from qtui.tools import bench; print(bench.format_table(json.load(open(sys.argv[1]))))" \
  "$W/bench-4b.json" > "$W/bench-4b.txt" 2>&1
python3 -m qtui serve /tmp/4b.gguf --engine cuda --port $PORT --max-slots 64 --max-context 4608 > "$W/serve.log" 2>&1 &
srv=$!
for _ in $(seq 120); do grep -q "ws://" "$W/serve.log" && break; sleep 0.5; done
timeout 60 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 64 --max-tokens 256 --json > "$W/load-4b.json" 2>&1
timeout 60 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 63 --max-tokens 512 --long-prompt 4000 --long-after 1 \
  --json > "$W/load-long-4b.json" 2>&1
kill -TERM $srv; wait $srv
tar -czf "$OUT/final.tgz" -C /tmp final
cat "$W/bench-4b.txt"
for f in "$W"/load*.json; do echo "== $f"; python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: v for k, v in r.items() if not isinstance(v, (list, dict))})" "$f" 2>&1 | tail -c 1200; done
