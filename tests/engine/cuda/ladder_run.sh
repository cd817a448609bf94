#!/bin/bash
# The parity ladder through the real server, on the device machine (repo root, wheels installed):
#   bash tests/engine/cuda/ladder_run.sh "<presets>"     e.g. "4b 0.8b 4b:q3_k_m" (NAME or NAME:QUANT)
# For each preset: write the synthetic file, start `qtui serve --engine cuda --max-slots $SLOTS` (SLOTS, default 64), run
# `qtui parity --ladder $LADDER` (greedy) and `qtui parity --sampled --ladder $SAMPLED` against it (SAMPLED=0:
# skipped), the `qtui load` runs (LOAD=0: skipped), keep the witness JSONs and the printed tables under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PORT=${PORT:-8791}
LADDER=${LADDER:-1,4,8,16,32,64}
SAMPLED=${SAMPLED:-1,4,8,16}
SLOTS=${SLOTS:-64}
source tests/engine/cuda/model_spec.sh
for spec in ${1:-4b}; do
  model_spec "$spec" || exit 1
  preset=$TAG
  python3 -m qtui info "$GGUF" --max-slots $SLOTS --max-context 4608 > "$OUT/info-$preset.txt" 2>&1
  python3 -m qtui serve "$GGUF" --engine cuda --port $PORT --max-slots $SLOTS --max-context 4608 --window-ms 150 \
    > "$OUT/serve-$preset.log" 2>&1 &
  srv=$!
  for _ in $(seq 240); do grep -q "listening\|serving\|ws://" "$OUT/serve-$preset.log" && break; sleep 0.5; done
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
  echo "# qtui parity --ladder $LADDER --prompts 64 --max-tokens ${T:-64} against qtui serve --engine cuda --max-slots $SLOTS on a synthetic $NAME $QUANT file, $gpu, commit ${QTUI_COMMIT:-unknown}" | tee "$OUT/ladder-$preset.txt"
  timeout ${T_LADDER:-200} python3 -m qtui parity --url ws://127.0.0.1:$PORT/ --ladder $LADDER --prompts 64 \
    --max-tokens ${T:-64} --out "$OUT/witness-$preset.json" 2>&1 | tee -a "$OUT/ladder-$preset.txt"
  if [ "$SAMPLED" != 0 ]; then
  echo "# qtui parity --sampled --ladder $SAMPLED --prompts 16 --max-tokens ${T:-64}, same server" | tee -a "$OUT/ladder-$preset.txt"
  timeout ${T_LADDER:-200} python3 -m qtui parity --url ws://127.0.0.1:$PORT/ --sampled --ladder $SAMPLED --prompts 16 \
    --max-tokens ${T:-64} --out "$OUT/witness-sampled-$preset.json" 2>&1 | tee -a "$OUT/ladder-$preset.txt"
  fi
  # through the server, not only the engine: 64 streaming clients, then 63 while a 4000-token prompt arrives
  if [ "${LOAD:-1}" != 0 ]; then
  timeout 120 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 64 --max-tokens 256 --rounds 2 --json \
    > "$OUT/load-$preset.json" 2>&1; tail -c 1500 "$OUT/load-$preset.json"; echo
  timeout 120 python3 -m qtui load ws://127.0.0.1:$PORT/ --clients 63 --max-tokens 512 --long-prompt 4000 \
    --long-after 1 --json > "$OUT/load-long-$preset.json" 2>&1; tail -c 1500 "$OUT/load-long-$preset.json"; echo
  fi
  kill -TERM $srv; wait $srv
done
