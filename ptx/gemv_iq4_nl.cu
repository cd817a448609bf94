// iq4_nl weights: tensor-core GEMV/GEMM and the embedding lookup over the repacked tiles (mma.cuh).
#include "gemm.cuh"

MMA_ALL(TIQ4_NL, iq4_nl)
