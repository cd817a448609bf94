// q6_k weights: tensor-core GEMV/GEMM (mma.cuh) and the embedding lookup (gemv.cuh).
#include "gemv.cuh"
#include "mma.cuh"

EMBED(FmtQ6_K, q6_k)
MMA_ALL(MmaQ6_K, q6_k)
