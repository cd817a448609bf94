#!/bin/bash
# The one-GPU witness of the Ray Serve deployment (issue 15), on the GPU machine (repo root). Ray's wheel and its
# needs (~100 MB) exceed one call's 64 MiB, so they come over three back-to-back calls to one warm machine:
#   call 1: cp .rayw1/* /tmp/rayparts/        call 2: cp .rayw2/* /tmp/rayparts/
#   call 3: QTUI_COMMIT=<sha> bash tests/deploy/gpu_ray_run.sh      (carry .rayw3 and .whl)
# Then: 4b Q4_K_M file; `qtui load` 16 clients x 256 tokens x 2 rounds against `qtui serve --engine cuda` and
# against `qtui serve --engine cuda --replicas 1` (Ray Serve), each after a warm-up burst; `qtui parity --ladder
# 1,4,8,16` against the latter. Calls 1 and 2 may be skipped while /tmp/rayparts is still there (warm machine).
source tests/engine/cuda/gpu_env.sh
cp .rayw3/* /tmp/rayparts/ && cat /tmp/rayparts/ray.part.* > /tmp/rayparts/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl \
  && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/rayparts/*.whl \
  || exit 1
export PATH=/tmp/site/bin:$PATH
python3 -c "import ray, ray.serve; print('ray', ray.__version__)" || exit 1
PORT=8795; SLOTS=16
python3 -m qtui make-model /tmp/4b.gguf --preset 4b --quant q4_k_m --seed 0 > /dev/null 2>&1
run_load() {  # $1: label, rest: extra serve flags
  local label=$1; shift
  python3 -m qtui serve /tmp/4b.gguf --engine cuda --port $PORT --max-slots $SLOTS --max-context 2048 "$@" \
    > "$OUT/serve-$label.log" 2>&1 &
  local srv=$!
  for _ in $(seq 240); do grep -q "ws://" "$OUT/serve-$label.log" && break; sleep 0.5; done
  sleep 2  # a warm-up burst first: the first steps of each row count JIT the PTX and capture the graphs
  timeout 100 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 16 --max-tokens 32 --json > "$OUT/warm-$label.json" 2>&1
  timeout 150 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 16 --max-tokens 256 --rounds 2 --json \
    > "$OUT/load-$label.json" 2>&1
  if [ "$label" = ray1 ]; then
    timeout 150 python3 -m qtui parity --url ws://127.0.0.1:$PORT/ --ladder 1,4,8,16 --prompts 32 --max-tokens 32 \
      --out "$OUT/parity-ray1.json" > "$OUT/parity-ray1.txt" 2>&1
  fi
  kill -INT $srv; wait $srv
}
run_load serve
run_load ray1 --replicas 1
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = {k: json.load(open(f"{out}/load-{k}.json")) for k in ("serve", "ray1")}
print(f"# commit {__import__('os').environ.get('QTUI_COMMIT', '?')}: qtui load --clients 16 --max-tokens 256 --rounds 2, 4b Q4_K_M, H200")
keys = [k for k, v in rows["serve"].items() if isinstance(v, (int, float))]
for k in keys:
    a, b = rows["serve"][k], rows["ray1"].get(k)
    ratio = f"{b / a:.3f}" if isinstance(b, (int, float)) and a else ""
    print(f"{k:28} {a:>12.2f} {b if b is None else round(b, 2):>12}  {ratio}")
PY
tail -8 "$OUT/parity-ray1.txt"
