#!/bin/bash
# A/B of PTX variants on whole steps, on the GPU machine (repo root): `qtui bench --profile --json` with the
# committed ptx/ (A) and with each variant's .ptxvar/<v>/ (B, C, ...; QTUI_PTX_DIR: a variant's missing modules
# come from ptx/), then `qtui bench --compare`. Judge a kernel change here, not by one kernel's GEMV speed alone
# (PERF.md: 3 blocks per SM won per GEMV and lost on the 0.8b step).
#   bash tests/engine/cuda/ab_run.sh "<variants>" "<presets>" [bench args]
# e.g. ab_run.sh "occ3" "4b 0.8b" "--ladder 1,8,16,64 --long-prompt 0". JSON + tables under $OUT/ab-<preset>-*.
source tests/engine/cuda/gpu_env.sh
source tests/engine/cuda/model_spec.sh
ARGS=${3:-"--ladder 1,4,16,64 --long-prompt 0 --steps 32"}
for spec in ${2:-4b}; do
  model_spec "$spec" || exit 1
  files=()
  for v in base $1; do
    dir=ptx; [ "$v" != base ] && dir=.ptxvar/$v
    f="$OUT/ab-$TAG-$v.json"
    QTUI_PTX_DIR=$dir timeout ${T_BENCH:-150} python3 -m qtui bench "$GGUF" --engine cuda --profile --json $ARGS \
      > "$f" 2> "${f%.json}.err" && files+=("$f") || { echo "# $v on $TAG failed:"; tail -5 "${f%.json}.err"; }
  done
  echo "== $TAG: A = base${1:+, then $1}"
  python3 -m qtui bench --compare "${files[@]}" | tee "$OUT/ab-$TAG.txt"
done
