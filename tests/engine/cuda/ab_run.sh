#!/bin/bash
# A/B on whole steps, on the GPU machine (repo root): `qtui bench --profile --json` with the committed ptx/ and
# defaults (A), then once per variant (B, C, ...), then `qtui bench --compare`. A variant is a PTX build
# .ptxvar/<v>/ (QTUI_PTX_DIR: its missing modules come from ptx/) or, written VAR=value, an environment setting
# of the host side (e.g. QTUI_MMA_CLUSTER=0), or both joined by + (occ2+QTUI_GEMM_STAGES=1+QTUI_GEMM_RESIDENT_BLOCKS=264).
# Judge a kernel change here, not by one kernel's GEMV speed alone (PERF.md: 3 blocks per SM won per GEMV and lost
# on the 0.8b step).
#   bash tests/engine/cuda/ab_run.sh "<variants>" "<presets>" [bench args]
# e.g. ab_run.sh "occ3 QTUI_MMA_CLUSTER=0" "4b 0.8b" "--ladder 1,8,16,64 --long-prompt 0". JSON + tables under
# $OUT/ab-<preset>-*.
source tests/engine/cuda/gpu_env.sh
source tests/engine/cuda/model_spec.sh
ARGS=${3:-"--ladder 1,4,16,64 --long-prompt 0 --steps 32"}
for spec in ${2:-4b}; do
  model_spec "$spec" || exit 1
  files=()
  for v in base $1; do
    IFS=+ read -r -a parts <<< "$v"  # dir+VAR=v+...: a PTX build with the host settings it needs
    if [ "${parts[0]}" = base ]; then setting=(QTUI_PTX_DIR=ptx)
    elif [[ "${parts[0]}" == *=* ]]; then setting=("${parts[0]}")
    else setting=(QTUI_PTX_DIR=.ptxvar/${parts[0]}); fi
    setting+=("${parts[@]:1}")
    f="$OUT/ab-$TAG-${v//[=\/+]/-}.json"
    env "${setting[@]}" timeout ${T_BENCH:-150} python3 -m qtui bench "$GGUF" --engine cuda --profile --json $ARGS \
      > "$f" 2> "${f%.json}.err" && files+=("$f") || { echo "# $v on $TAG failed:"; tail -5 "${f%.json}.err"; }
  done
  echo "== $TAG: A = base${1:+, then $1}"
  python3 -m qtui bench --compare "${files[@]}" | tee "$OUT/ab-$TAG.txt"
done
