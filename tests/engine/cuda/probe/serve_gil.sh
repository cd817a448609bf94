#!/bin/bash
# The server's c = 64 gap (PERF.md session 13): 64 streaming clients against a fresh qtui serve per variant, the GIL switch
# interval (CPython default 5 ms, 0.5 ms, 0.1 ms) and uvloop varied. On the GPU machine, repo root: bash tests/engine/cuda/probe/serve_gil.sh
source tests/engine/cuda/gpu_env.sh
source tests/engine/cuda/model_spec.sh
model_spec 4b
nvidia-smi --query-gpu=name --format=csv,noheader
PORT=8791
for v in default si500 si100 uvloop; do
  python3 - "$v" "$GGUF" $PORT > $OUT/serve-$v.log 2>&1 <<'PY' &
import sys
v, gguf, port = sys.argv[1:4]
if v == "si500": sys.setswitchinterval(0.0005)
if v == "si100": sys.setswitchinterval(0.0001)
if v == "uvloop":
    import uvloop; uvloop.install()
from qtui.cli import main
sys.exit(main(["serve", gguf, "--engine", "cuda", "--port", port, "--max-slots", "64", "--max-context", "4608", "--window-ms", "150"]))
PY
  srv=$!
  for _ in $(seq 240); do grep -q "ws://" $OUT/serve-$v.log && break; sleep 0.25; done
  timeout 60 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 64 --max-tokens 256 --rounds 3 --json > $OUT/load-$v.json 2>&1
  python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(sys.argv[2], 'steady', r['steady_tok_s'], 'agg', r['agg_tok_s'], 'gap p50', r['gap_ms_p50'], 'p99', r['gap_ms_p99'])" $OUT/load-$v.json $v || tail -3 $OUT/load-$v.json
  kill -TERM $srv; wait $srv
  PORT=$((PORT+1))
done
