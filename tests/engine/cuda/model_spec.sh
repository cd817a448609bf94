#!/bin/bash
# Sourced by the witness scripts: model_spec NAME[:QUANT] sets NAME, QUANT (default q4_k_m), TAG (NAME, or
# NAME-QUANT when not q4_k_m) and GGUF=/tmp/TAG.gguf, writing the synthetic file (seed 0) unless it exists.
model_spec() {
  NAME=${1%%:*}; QUANT=${1#*:}; [ "$QUANT" = "$1" ] && QUANT=q4_k_m
  TAG=$NAME; [ "$QUANT" != q4_k_m ] && TAG=$NAME-$QUANT
  GGUF=/tmp/$TAG.gguf
  [ -f "$GGUF" ] || python3 -m qtui make-model "$GGUF" --preset "$NAME" --quant "$QUANT" --seed 0 > /dev/null
}
