#!/bin/bash
# Branch f16-split on the GPU machine: its GPU tests, then its GEMV/GEMM speed and whole steps against main's
# kernels (.ptxvar/main: `bash tests/engine/cuda/branch_ptx.sh main main` here first; the host code is the same).
# Probe builds of this branch under .ptxvar/f16-<name> join the speed table, e.g. the x chunk streamed once:
#   mkdir -p .ptxvar/f16-xonce; for t in q4_k q6_k; do nvcc -ptx -arch=sm_90a -O3 -std=c++17 -DGEMM_PROBE_X_ONCE \
#     -I ptx ptx/gemv_$t.cu -o .ptxvar/f16-xonce/gemv_$t.ptx; done
#   bash tests/engine/cuda/probe/f16_split_run.sh [probe|tests|speed|steps ...]
source tests/engine/cuda/gpu_env.sh
for part in ${@:-probe tests speed steps}; do
  case $part in
    probe) timeout 120 python3 tests/engine/cuda/probe/wgmma_probe.py 2>&1 | tee $OUT/wgmma-probe.txt | grep -E "16 |EQUALS|MISMATCH" ;;
    tests) timeout 300 python3 -m pytest -m gpu tests/engine/cuda -q -rf -x -p no:cacheprovider > $OUT/gpu-tests.log 2>&1
           grep -E "^FAILED|passed|failed|Error" $OUT/gpu-tests.log | tail -12 ;;
    speed) for v in base main $(ls .ptxvar 2>/dev/null | grep -x 'f16-.*'); do  # f16-*: this branch's probe builds
             d=ptx; [ $v = base ] || d=.ptxvar/$v
             QTUI_PTX_DIR=$d timeout 120 python3 tests/engine/cuda/gemv_speed.py --rows 1,16,64,256 --json $OUT/speed-$v.json \
               > $OUT/speed-$v.txt 2>&1 || echo "# speed $v failed"
           done
           python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
vs = ["main", "base"] + sorted(f[6:-5] for f in os.listdir(out) if f.startswith("speed-f16-") and f.endswith(".json"))
tabs = {v: {(r["matrix"], r["m"]): r["us"] for r in json.load(open(f"{out}/speed-{v}.json"))["rows"]} for v in vs}
print(f"{'matrix':20} {'m':>4} " + " ".join(f"{v:>10}" for v in vs) + "   (us per launch; base = this branch)")
for key, us in tabs["main"].items():
    print(f"{key[0]:20} {key[1]:4d} " + " ".join(f"{tabs[v].get(key, float('nan')):10.1f}" for v in vs))
PY
           ;;
    steps) T_BENCH=200 bash tests/engine/cuda/ab_run.sh main 4b "--ladder 1,16,64 --long-prompt 0 --steps 32" ;;
  esac
done
