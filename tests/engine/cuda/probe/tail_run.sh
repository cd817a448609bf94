#!/bin/bash
# The GEMM's cut tail on the GPU machine, from a checkout of branch warp-fold (ptx/ = warp mode): its GPU tests, then
# GEMM speed, block timelines and whole steps against main and prefix-slab, in one call (~8 min, the GPU tests ~4.5
# with the two new row-count shapes). Build here first:
#   bash tests/engine/cuda/branch_ptx.sh main main; bash tests/engine/cuda/branch_ptx.sh prefix-slab prefix-slab
#   for v in warp-fold prefix-slab; do d=.ptxvar/trace-$v; mkdir -p $d /tmp/src-$v; git archive $v ptx | tar x -C /tmp/src-$v
#     for t in q4_k q6_k; do nvcc -ptx -arch=sm_90a -O3 -std=c++17 -DGEMM_TRACE -I /tmp/src-$v/ptx \
#       /tmp/src-$v/ptx/gemv_$t.cu -o $d/gemv_$t.ptx; done; done
#   bash tests/engine/cuda/probe/tail_run.sh      (summaries in $OUT, every log in $OUT/logs.tgz)
source tests/engine/cuda/gpu_env.sh
L=/tmp/logs; mkdir -p $L; FINAL=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $FINAL/gpu.txt
source tests/engine/cuda/model_spec.sh
( model_spec 4b ) > $L/make.log 2>&1 &
mk=$!
timeout 330 python3 -m pytest -m gpu tests/engine/cuda -q -rf -p no:cacheprovider > $L/gpu-tests.log 2>&1
grep -E "^FAILED|passed|failed|rror" $L/gpu-tests.log | tail -6 | tee $FINAL/tests.txt
OUT=$L T_SPEED=90 bash tests/engine/cuda/probe/gemm_variants.sh "main prefix-slab" 64 | tee $FINAL/variants.txt
for v in trace-warp-fold trace-prefix-slab; do
  QTUI_PTX_DIR=.ptxvar/$v timeout 40 python3 tests/engine/cuda/probe/gemm_trace.py --rows 64 > $L/$v.txt 2>&1
done
for v in trace-warp-fold trace-prefix-slab; do echo "## $v"; grep -vE "^   block" $L/$v.txt; done > $FINAL/trace.txt
wait $mk
OUT=$L T_BENCH=90 bash tests/engine/cuda/ab_run.sh "main prefix-slab" 4b "--ladder 16,64 --long-prompt 0 --steps 32" \
  | grep -v "chunk of 256: [a-z]\|m=1 step: [a-z]" | tee $FINAL/ab.txt
tar czf $FINAL/logs.tgz -C /tmp logs
echo "all done at $SECONDS s"
