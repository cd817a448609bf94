// iq4_xs weights: tensor-core GEMV/GEMM and the embedding lookup over the repacked tiles (mma.cuh).
#include "gemm.cuh"

MMA_ALL(TIQ4_XS, iq4_xs)
