#!/bin/bash
# Judge branch producer-stage (on top of gemm-n32) in one GPU call (ptx/PERF.md, session 10): the GPU tests of the
# kernels it changed and of the engine's promises, then A/B on whole steps: A = both on, then VARIANTS (default:
# B = the producers not staging, i.e. gemm-n32; C = neither, main's behaviour). T_TESTS / T_BENCH: time limits.
set -o pipefail
source tests/engine/cuda/gpu_env.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${TESTS:-1}" != 0 ]; then
  timeout "${T_TESTS:-240}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/engine/cuda/test_staged.py \
    "tests/engine/cuda/test_gemv.py::test_swiglu_gemv_matches_oracle_and_is_row_invariant" \
    tests/engine/cuda/test_layers.py tests/engine/cuda/test_prefill.py tests/engine/cuda/test_batch_invariance.py \
    tests/engine/cuda/test_engine.py > "$OUT/stage-gpu-tests.log" 2>&1
  tail -2 "$OUT/stage-gpu-tests.log"
fi
T_BENCH=${T_BENCH:-100} bash tests/engine/cuda/ab_run.sh \
  "${VARIANTS:-QTUI_PRODUCERS_STAGE=0 QTUI_PRODUCERS_STAGE=0+QTUI_GEMM_NARROW_ROWS=0}" 4b \
  "${BENCH_ARGS:---ladder 16,24,32,64 --long-prompt 0 --steps 32}" > "$OUT/stage-ab.txt" 2>&1
grep -E "^[A-E] =|aggregate|prefill|m=64 step: (whole|gemm_stage|rmsnorm|delta_step|attn_combine)" "$OUT/stage-ab.txt" | head -40
