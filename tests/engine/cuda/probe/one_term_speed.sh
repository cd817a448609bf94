#!/bin/bash
# What x as one fp16 term would gain in speed (not a test: a device-side reading aid, ptx/PERF.md "Session 30").
# Build the timing-only variant here (the lo MMA chain left out of the GEMM and the GEMV; wrong outputs):
#   d=.ptxvar/nolo; mkdir -p $d; for t in q4_k q6_k; do
#     nvcc -ptx -arch=sm_90a -O3 -std=c++17 -DGEMM_PROBE_NO_LO -I ptx ptx/gemv_$t.cu -o $d/gemv_$t.ptx; done
# then, carrying .ptxvar/nolo, on the GPU machine: bash tests/engine/cuda/probe/one_term_speed.sh [PRESET] (4b).
# Prints the m = 64 and m = 1 decode steps (us, graph replays) of each build, and the GEMMs' share of each.
source tests/engine/cuda/gpu_env.sh
source tests/engine/cuda/model_spec.sh
model_spec "${1:-4b}" || exit 1
for v in base nolo; do
  dir=ptx; [ $v != base ] && dir=.ptxvar/$v
  echo "== $v ($dir)"
  QTUI_PTX_DIR=$dir timeout 90 python3 tests/engine/cuda/probe/skip_kernels.py "$GGUF" --rows 64 --steps 48 mma_gemm \
    2>&1 | tail -3
  QTUI_PTX_DIR=$dir timeout 60 python3 tests/engine/cuda/probe/skip_kernels.py "$GGUF" --rows 1 --steps 96 mma_ \
    2>&1 | tail -2
done
