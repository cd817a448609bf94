#!/bin/bash
# Per-instruction stall sampling (Nsight Compute source counters) of the 4b GEMVs: where a warp's cycles go,
# SASS line by line.   bash tests/engine/cuda/sass_prof.sh "<matrix substrings>" "<row counts>"
# KREGEX=mma_gemm profiles the 64-token GEMM instead (rows > 16). Leaves $OUT/sass.tgz: <name>-m<m>.csv
# (ncu --page source --print-source sass) and the ncu summaries.
source tests/engine/cuda/gpu_env.sh
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1); echo "ncu: $NCU"
mkdir -p /tmp/sass
for name in ${1:-qkv}; do for m in ${2:-1}; do
  rep=/tmp/sass/$name-m$m
  timeout 150 $NCU --clock-control none -k regex:"${KREGEX:-mma_(gemv|swiglu)}" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy \
    -o $rep -f python3 tests/engine/cuda/gemv_speed.py --only "$name" --rows $m --eager > $rep.log 2>&1
  $NCU --import $rep.ncu-rep --page source --print-source sass --csv > $rep.csv 2>> $rep.log
  $NCU --import $rep.ncu-rep > $rep.txt 2>&1
  echo "== $name m=$m: $(wc -l < $rep.csv) sass lines"; grep -E "Duration|Warp Cycles Per Issued|Registers Per|Achieved Occ" $rep.txt | head -5
done; done
tar czf $OUT/sass.tgz -C /tmp/sass $(cd /tmp/sass && ls *.csv *.txt *.log)
