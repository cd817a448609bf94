#!/bin/bash
# A branch's kernels as a variant build, here (the GPU machine gets no .git): writes .ptxvar/<name>/ with the
# ptx/*.ptx files that differ between BRANCH and HEAD, for QTUI_PTX_DIR=.ptxvar/<name> (ab_run.sh, gemv_speed.py,
# the GPU tests; missing modules come from ptx/). The host code of HEAD must fit the branch's kernels.
#   bash tests/engine/cuda/branch_ptx.sh BRANCH [NAME]
set -euo pipefail
branch=$1; name=${2:-${branch//\//-}}
out=.ptxvar/$name; rm -rf "$out"; mkdir -p "$out"
for f in $(git diff --name-only HEAD "$branch" -- 'ptx/*.ptx'); do git show "$branch:$f" > "$out/$(basename "$f")"; done
echo "$out: $(ls "$out" | tr '\n' ' ')"
