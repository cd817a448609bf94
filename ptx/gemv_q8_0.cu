// q8_0 weights: tensor-core GEMV/GEMM (mma.cuh) and the embedding lookup (gemv.cuh).
#include "gemv.cuh"
#include "mma.cuh"

EMBED(FmtQ8_0, q8_0)
MMA_ALL(MmaQ8_0, q8_0)
