// GEMV kernels for q5_k weights (see gemv.cuh).
#include "gemv.cuh"

GEMV_ALL(FmtQ5_K, q5_k)
