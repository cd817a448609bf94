// q5_k weights: tensor-core GEMV/GEMM (mma.cuh) and the embedding lookup (gemv.cuh).
#include "gemv.cuh"
#include "mma.cuh"

EMBED(FmtQ5_K, q5_k)
MMA_ALL(MmaQ5_K, q5_k)
