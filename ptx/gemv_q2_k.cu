// q2_k weights: tensor-core GEMV/GEMM and the embedding lookup over the repacked tiles (mma.cuh).
#include "gemm.cuh"

MMA_ALL(TQ2_K, q2_k)
