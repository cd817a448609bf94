// GEMV kernels for bf16 weights (see gemv.cuh).
#include "gemv.cuh"

GEMV_ALL(FmtBF16, bf16)
