// GEMV kernels for f32 weights (see gemv.cuh).
#include "gemv.cuh"

GEMV_ALL(FmtF32, f32)
