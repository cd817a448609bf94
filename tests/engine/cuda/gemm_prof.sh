#!/bin/bash
# Nsight Compute on the 64-token GEMM (4b shapes, m = 64): speed of light, memory, warp stalls and the SASS
# source counters, then the GEMV speed of the PTX variants under .ptxvar/<v>.
#   bash tests/engine/cuda/gemm_prof.sh "<matrix substrings>" "<variants>"
source tests/engine/cuda/gpu_env.sh
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1); echo "ncu: $NCU"
mkdir -p /tmp/prof
IFS=';' read -ra names <<< "${1:-gdn qkv+z;ffn gate+up}"
for name in "${names[@]}"; do
  tag=${name//[^a-z0-9]/_}; rep=/tmp/prof/$tag
  QTUI_PTX_DIR=${PROF_PTX:-ptx} timeout 200 $NCU --clock-control none -k regex:mma_gemm --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SourceCounters --section Occupancy --section LaunchStats \
    -o $rep -f python3 tests/engine/cuda/gemv_speed.py --only "$name" --rows ${ROWS:-64} --eager > $rep.log 2>&1
  $NCU --import $rep.ncu-rep > $OUT/ncu-$tag.txt 2>&1
  $NCU --import $rep.ncu-rep --page source --print-source sass --csv > $OUT/sass-$tag.csv 2>> $rep.log
  echo "== $name"; grep -E "Duration|Throughput|Hit Rate|Issued Ipc|Warp Cycles Per Issued|Registers Per|Stall" $OUT/ncu-$tag.txt | head -30
done
for v in base $2; do
  d=ptx; [ "$v" = base ] || d=.ptxvar/$v
  QTUI_PTX_DIR=$d timeout 90 python3 tests/engine/cuda/gemv_speed.py --rows 64,256 > $OUT/speed-$v.txt 2>&1
  echo "== $v"; grep -E "^(gdn|attn|ffn|ssm|lm)" $OUT/speed-$v.txt | cut -c1-22,55-
done
