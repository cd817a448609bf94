#!/bin/bash
# Ray onto the GPU machine, then issue 15's GPU witnesses (tests/deploy/gpu_witness.sh). Ray's wheel and its needs
# (~100 MB) exceed one call's 64 MiB, so they come over three back-to-back calls to one warm machine, the wheel
# split into parts (`split -b 46000000`) and the needs not already in .whl spread over .rayw1..3:
#   call 1: cp .rayw1/* /tmp/rayparts/        call 2: cp .rayw2/* /tmp/rayparts/
#   call 3: QTUI_COMMIT=<sha> bash tests/deploy/gpu_ray_run.sh      (carry .rayw3 and .whl)
# Calls 1 and 2 may be skipped while /tmp/rayparts is still there (warm machine).
mkdir -p /tmp/rayparts && cp .rayw3/* /tmp/rayparts/ \
  && cat /tmp/rayparts/ray.part.* > /tmp/rayparts/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl \
  && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-ray \
    /tmp/rayparts/*.whl || exit 1
exec bash tests/deploy/gpu_witness.sh
