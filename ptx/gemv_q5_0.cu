// q5_0 weights: tensor-core GEMV/GEMM and the embedding lookup over the repacked tiles (mma.cuh).
#include "gemm.cuh"

MMA_ALL(TQ5_0, q5_0)
