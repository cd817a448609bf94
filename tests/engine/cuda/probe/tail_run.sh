#!/bin/bash
# The GEMM's cut tail on the GPU machine, from a checkout of branch swiglu-wg (ptx/ = warp mode for one GEMM,
# warpgroup mode for the SwiGLU): its GPU tests, then GEMM speed, block timelines and whole steps against main,
# prefix-slab and warp-fold, in one call (~9 min; each later step is skipped when time runs short). Build here first:
#   for b in main prefix-slab warp-fold; do bash tests/engine/cuda/branch_ptx.sh $b $b
#     (cd .ptxvar/$b && ls | grep -vE 'gemv_q(4|5|6)_k|gemv_q(5_0|8_0)' | xargs -r rm); done   (the 4b's types: 64 MiB)
#   for v in swiglu-wg prefix-slab; do d=.ptxvar/trace-$v; mkdir -p $d /tmp/src-$v; git archive $v ptx | tar x -C /tmp/src-$v
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
echo "tests done at $SECONDS s"
OUT=$L T_SPEED=60 bash tests/engine/cuda/probe/gemm_variants.sh "main prefix-slab warp-fold" 64 | tee $FINAL/variants.txt
if [ $SECONDS -lt 440 ]; then
  for v in trace-swiglu-wg trace-prefix-slab; do
    QTUI_PTX_DIR=.ptxvar/$v timeout 40 python3 tests/engine/cuda/probe/gemm_trace.py --rows 64 > $L/$v.txt 2>&1
  done
  for v in trace-swiglu-wg trace-prefix-slab; do echo "## $v"; grep -vE "^   block" $L/$v.txt; done > $FINAL/trace.txt
fi
wait $mk
[ $SECONDS -lt 470 ] && OUT=$L T_BENCH=50 bash tests/engine/cuda/ab_run.sh "main warp-fold" 4b \
  "--ladder 16,64 --long-prompt 0 --steps 32" | grep -v "chunk of 256: [a-z]\|m=1 step: [a-z]" | tee $FINAL/ab.txt
tar czf $FINAL/logs.tgz -C /tmp logs
echo "all done at $SECONDS s"
