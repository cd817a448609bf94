#!/bin/bash
# The parity ladder through the real server, on the device machine (repo root, wheels installed):
#   bash tests/engine/cuda/ladder_run.sh "<presets>"     e.g. "4b 0.8b"
# For each preset: write the synthetic Q4_K_M file, start `qtui serve --engine cuda --max-slots 64`, run
# `qtui parity --ladder $LADDER` (greedy) and `qtui parity --sampled --ladder $SAMPLED` against it, keep the
# witness JSONs and the printed tables under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PORT=${PORT:-8791}
LADDER=${LADDER:-1,4,8,16,32,64}
SAMPLED=${SAMPLED:-1,4,8,16}
for preset in ${1:-4b}; do
  [ -f "/tmp/$preset.gguf" ] || python3 -m qtui make-model "/tmp/$preset.gguf" --preset "$preset" --quant q4_k_m > /dev/null || exit 1
  python3 -m qtui info "/tmp/$preset.gguf" --max-slots 64 --max-context 4608 > "$OUT/info-$preset.txt" 2>&1
  python3 -m qtui serve "/tmp/$preset.gguf" --engine cuda --port $PORT --max-slots 64 --max-context 4608 --window-ms 150 \
    > "$OUT/serve-$preset.log" 2>&1 &
  srv=$!
  for _ in $(seq 240); do grep -q "listening\|serving\|ws://" "$OUT/serve-$preset.log" && break; sleep 0.5; done
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
  echo "# qtui parity --ladder $LADDER --prompts 64 --max-tokens ${T:-64} against qtui serve --engine cuda --max-slots 64 on a synthetic $preset Q4_K_M file, $gpu, commit ${QTUI_COMMIT:-unknown}" | tee "$OUT/ladder-$preset.txt"
  timeout ${T_LADDER:-200} python3 -m qtui parity --url ws://127.0.0.1:$PORT/ --ladder $LADDER --prompts 64 \
    --max-tokens ${T:-64} --out "$OUT/witness-$preset.json" 2>&1 | tee -a "$OUT/ladder-$preset.txt"
  echo "# qtui parity --sampled --ladder $SAMPLED --prompts 16 --max-tokens ${T:-64}, same server" | tee -a "$OUT/ladder-$preset.txt"
  timeout ${T_LADDER:-200} python3 -m qtui parity --url ws://127.0.0.1:$PORT/ --sampled --ladder $SAMPLED --prompts 16 \
    --max-tokens ${T:-64} --out "$OUT/witness-sampled-$preset.json" 2>&1 | tee -a "$OUT/ladder-$preset.txt"
  # through the server, not only the engine: 64 streaming clients, then 63 while a 4000-token prompt arrives
  timeout 120 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 64 --max-tokens 256 --rounds 2 --json \
    > "$OUT/load-$preset.json" 2>&1; tail -c 1500 "$OUT/load-$preset.json"; echo
  timeout 120 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 63 --max-tokens 512 --long-prompt 4000 \
    --long-after 1 --json > "$OUT/load-long-$preset.json" 2>&1; tail -c 1500 "$OUT/load-long-$preset.json"; echo
  kill -TERM $srv; wait $srv
done
