#!/bin/bash
# What bounds the 64-token GEMM (not a test: a device-side reading aid for ptx/PERF.md). Build here, each variant
# of ptx/gemm.cuh's bottleneck probes into .ptxvar/<v> (q4_k and q6_k modules: timing only, wrong sums):
#   for v in X_ONCE W_ONCE; do d=.ptxvar/$(echo $v | tr A-Z_ a-z-); mkdir -p $d
#     for t in q4_k q6_k; do nvcc -ptx -arch=sm_90a -O3 -std=c++17 -DGEMM_PROBE_$v -I ptx ptx/gemv_$t.cu -o $d/gemv_$t.ptx; done; done
# then on the GPU machine: bash tests/engine/cuda/probe/gemm_bottleneck.sh [rows]. One gemv_speed table per
# variant under $OUT, and the GEMM launches' times side by side.
exec bash tests/engine/cuda/probe/gemm_variants.sh "x-once w-once" "${1:-64,256}"
