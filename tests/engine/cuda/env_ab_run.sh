#!/bin/bash
# A/B of an environment switch on whole steps, on the GPU machine (repo root): `qtui bench --profile --json` with
# VAR=A then VAR=B on each preset, then `qtui bench --compare` (as ab_run.sh does for PTX variants; for changes
# that the host side switches, e.g. QTUI_MMA_CLUSTER).
#   bash tests/engine/cuda/env_ab_run.sh VAR "A B" "<presets>" [bench args]
source tests/engine/cuda/gpu_env.sh
source tests/engine/cuda/model_spec.sh
VAR=$1; ARGS=${4:-"--ladder 1,4,16,64 --long-prompt 0 --steps 32"}
for spec in ${3:-4b}; do
  model_spec "$spec" || exit 1
  files=()
  for v in $2; do
    f="$OUT/ab-$TAG-$VAR-$v.json"
    env "$VAR=$v" timeout ${T_BENCH:-150} python3 -m qtui bench "$GGUF" --engine cuda --profile --json $ARGS \
      > "$f" 2> "${f%.json}.err" && files+=("$f") || { echo "# $VAR=$v on $TAG failed:"; tail -5 "${f%.json}.err"; }
  done
  echo "== $TAG: $VAR = $2"
  python3 -m qtui bench --compare "${files[@]}" | tee "$OUT/ab-$TAG-$VAR.txt"
done
