// q5_1 weights: tensor-core GEMV/GEMM and the embedding lookup over the repacked tiles (mma.cuh).
#include "gemm.cuh"

MMA_ALL(TQ5_1, q5_1)
