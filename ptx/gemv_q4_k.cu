// GEMV kernels for q4_k weights (see gemv.cuh).
#include "gemv.cuh"

GEMV_ALL(FmtQ4_K, q4_k)
