// GEMV kernels for q8_0 weights (see gemv.cuh).
#include "gemv.cuh"

GEMV_ALL(FmtQ8_0, q8_0)
