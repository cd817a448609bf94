#!/bin/bash
# Sourced first by the GPU-machine scripts here: unbuffered output, $OUT, and the carried wheels (.whl/, made by
# ../shared/tools/gpu-wheels.sh) installed into /tmp/site for the image's python3.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -z "$QTUI_GPU_ENV" ]; then  # once per command, however many of these scripts it sources
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD QTUI_GPU_ENV=1 || exit 1
fi
