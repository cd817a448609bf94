// GEMV kernels for q6_k weights (see gemv.cuh).
#include "gemv.cuh"

GEMV_ALL(FmtQ6_K, q6_k)
