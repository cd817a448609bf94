#!/bin/bash
# Issue 15's GPU witnesses (GPU machine, repo root; not run in CI): the same 16-client load, after a warm-up burst,
# through `qtui serve` and through a 1-replica Ray Serve deployment on one GPU (within 5 % is the bar), then with
# N GPUs, N replicas at c = 16·N (>= 0.9·N x one GPU) and the parity ladder through the deployment. Ray must be
# importable first from /tmp/site-ray: tests/deploy/gpu_ray_run.sh brings it over and then runs this script.
#   QTUI_COMMIT=<sha> PRESET=4b bash tests/deploy/gpu_witness.sh
# A dry run of the plumbing on a CPU machine: ENGINE=cpu N=2 PRESET=tiny OUT=/tmp/out bash tests/deploy/gpu_witness.sh
if [ -d .whl ]; then source tests/engine/cuda/gpu_env.sh; else OUT=${OUT:-/tmp/out}; export PYTHONUNBUFFERED=1; fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site-ray
W=$OUT/deploy; mkdir -p "$W"
ENGINE=${ENGINE:-cuda}; N=${N:-$(nvidia-smi -L | wc -l)}
PRESET=${PRESET:-4b}; M=/tmp/$PRESET.gguf
python3 -c "import ray; print('ray', ray.__version__)" || { echo "ray is not importable: no witness"; exit 1; }
{ date -u; echo "commit ${QTUI_COMMIT:-unknown}, engine $ENGINE, $N devices"; nvidia-smi -L 2>/dev/null; } | tee "$W/env.txt"
[ -f "$M" ] || python3 -m qtui make-model "$M" --preset "$PRESET" --quant q4_k_m --seed 0 > /dev/null

serve_and_load() {  # NAME CLIENTS LADDER SERVE-ARGS...: start, wait for the URL line, load (+ ladder), SIGINT
  local name=$1 clients=$2 ladder=$3; shift 3
  python3 -m qtui serve "$M" --engine "$ENGINE" --port 8765 --max-slots 64 "$@" > "$W/serve-$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 240); do grep -q "qtui serve: ws" "$W/serve-$name.log" && break; sleep 1; done
  # a warm-up burst first: the first steps of each row count load the PTX and capture the graphs
  timeout 100 python3 -m qtui load ws://127.0.0.1:8765/ --clients "$clients" --max-tokens 32 --json > /dev/null 2>&1
  timeout 300 python3 -m qtui load ws://127.0.0.1:8765/ --clients "$clients" --max-tokens 256 --rounds 2 --json \
    > "$W/load-$name.json" 2> "$W/load-$name.err"
  [ -n "$ladder" ] && timeout 300 python3 -m qtui parity --url ws://127.0.0.1:8765/ --ladder "$ladder" \
    --prompts 64 --max-tokens 64 --out "$W/parity-$name.json" > "$W/parity-$name.txt" 2>&1
  kill -INT $pid; wait $pid
  return 0
}
serve_and_load single 16 ""
serve_and_load ray1 16 "1,4,8,16" --replicas 1
serve_and_load ray1-frame0 16 "" --replicas 1 --frame-interval-ms 0  # a frame per step: what pacing buys
[ "$N" -gt 1 ] && serve_and_load "ray$N" $((16 * N)) "1,4,8,16,$((16 * N))" --replicas "$N"
python3 - "$W" "$N" <<'EOF'
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
names = ["single", "ray1", "ray1-frame0"] + ([f"ray{n}"] if n > 1 else [])
rows = {name: json.load(open(f"{w}/load-{name}.json")) for name in names}
base = rows["single"]["steady_tok_s"]
for name, r in rows.items():
    print(f"{name:>11}: clients {r['clients']:>4}  agg {r['agg_tok_s']:>8.1f}  steady {r['steady_tok_s']:>8.1f} tok/s"
          f"  = {r['steady_tok_s'] / base:.3f} x one process  ttft p50 {r['ttft_ms_p50']} ms  errors {r['errors']}")
EOF
for f in "$W"/parity-*.txt; do echo "== $f"; tail -8 "$f"; done
tar -czf "$OUT/deploy-witness.tgz" -C "$OUT" deploy
