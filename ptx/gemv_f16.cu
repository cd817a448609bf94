// GEMV kernels for f16 weights (see gemv.cuh).
#include "gemv.cuh"

GEMV_ALL(FmtF16, f16)
