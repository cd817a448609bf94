// q4_k weights: tensor-core GEMV/GEMM (mma.cuh) and the embedding lookup (gemv.cuh).
#include "gemv.cuh"
#include "mma.cuh"

EMBED(FmtQ4_K, q4_k)
MMA_ALL(MmaQ4_K, q4_k)
