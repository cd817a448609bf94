#!/bin/bash
# Nsight Compute on the 4b qkv GEMV at m = 1, 16, 64 (the figures in ptx/PERF.md), then the GEMV speed of the
# PTX variants under .ptxvar/<v>.   bash tests/engine/cuda/prof_run.sh "<variants>"
source tests/engine/cuda/gpu_env.sh
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1); echo "ncu: $NCU"
for m in 1 16 64; do
  timeout 100 $NCU --clock-control none -k regex:mma_gemv_q4_k --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    python3 tests/engine/cuda/gemv_speed.py --only "gdn qkv+z" --rows $m --eager > $OUT/ncu-m$m.txt 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issued Ipc|Theoretical Occ|L1/TEX Cache Throughput|L2 Cache Throughput|Block Limit" $OUT/ncu-m$m.txt | sed "s/^/[m=$m] /" | head -40
done
for v in $1; do QTUI_PTX_DIR=.ptxvar/$v timeout 60 python3 tests/engine/cuda/gemv_speed.py > $OUT/speed-$v.txt 2>&1; echo "== $v"; grep -E "^(gdn|attn|ffn|ssm|lm)" $OUT/speed-$v.txt | cut -c1-22,55-; done
