"""Host-side parts of the CUDA engine that run anywhere (CI has no GPU): error mapping, engine availability,
argument packing, GEMV bucket choice, the weight-type table."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from qtui.engine.cuda import driver as drv
from qtui.engine.cuda.kernels import (GEMV_BUCKETS, MAX_GEMV_ROWS, MMA_TYPES, UNIT_BYTES, KernelTable, gemv_bucket,
                                     mma_tiles, qtype_name)
from qtui.errors import CudaError, EngineUnavailable


def test_check_raises_cuda_error_naming_call_and_result():
    from cuda.bindings import driver as cu

    with pytest.raises(CudaError) as info:
        drv.check((cu.CUresult.CUDA_ERROR_INVALID_VALUE,), "cuMemAlloc(64)")
    assert info.value.call == "cuMemAlloc(64)" and info.value.error_name == "CUDA_ERROR_INVALID_VALUE"
    assert info.value.code == "cuda_error" and "cuMemAlloc(64)" in str(info.value)
    assert drv.check((cu.CUresult.CUDA_SUCCESS, 7), "x") == 7
    assert drv.check((cu.CUresult.CUDA_SUCCESS,), "x") is None


def test_cuda_available_never_raises_and_engine_refuses_without_driver(tiny_gguf):
    available = drv.cuda_available()
    assert isinstance(available, bool)
    if available:
        pytest.skip("a driver answers here: the GPU tests cover the engine")
    from qtui.engine.cuda.engine import CudaEngine
    from qtui.model.gguf_file import GGUFModel

    with pytest.raises(EngineUnavailable):
        CudaEngine(GGUFModel.open(tiny_gguf), max_slots=1, max_context=16, progress=False)


def test_kernel_prepacks_one_cell_per_argument():
    k = drv.Kernel(None, "k", (3, 1, 1), 128, [(0xDEAD0000, np.uint64), (7, np.int32), (2.5, np.float32),
                                                (1 << 40, np.int64)])
    assert [c.dtype for c in k.cells] == [np.uint64, np.int32, np.float32, np.int64]
    assert [c[0] for c in k.cells] == [0xDEAD0000, 7, 2.5, 1 << 40]
    assert k.params.tolist() == [c.ctypes.data for c in k.cells]  # the void** array the driver reads


def test_gemv_bucket_is_smallest_instantiation_at_least_m():
    for m in range(1, MAX_GEMV_ROWS + 1):
        b = gemv_bucket(m)
        assert b in GEMV_BUCKETS and b >= m and all(x < m for x in GEMV_BUCKETS if x < b)


def test_mma_token_tiles_cover_m_with_fewest_tiles():
    for m in range(1, MAX_GEMV_ROWS + 1):
        assert 8 * mma_tiles(m) >= m > 8 * (mma_tiles(m) - 1)


def test_integer_quant_gemvs_launch_tensor_core_kernels_with_m(monkeypatch):
    """Quant types go to ptx/mma.cuh (16-row tiles, 256 threads, real m passed); float types keep the FMA path."""
    kt = KernelTable()
    monkeypatch.setattr(kt, "fn", lambda module, name: (module, name))
    for qtype in MMA_TYPES:
        k = kt.gemv(qtype, 11, 1, 2, 3, 0, 512, 40)
        assert k.name == f"mma_gemv_{qtype}_n2" and k.grid == (3, 1, 1) and k.block == 256
        assert k.cells[-1][0] == 11
        k = kt.gemv_swiglu(qtype, 3, 1, 2, 3, 4, 512, 17)
        assert k.name == f"mma_swiglu_{qtype}_n1" and k.grid == (2, 1, 1)
        k = kt.gemv4(qtype, 5, [(1, 2, 40), (3, 4, 16)], 9, 512)
        assert k.name == f"mma_gemv4_{qtype}_n1" and k.grid == (4, 1, 1)
    k = kt.gemv("f16", 11, 1, 2, 3, 0, 512, 40)
    assert k.name == "gemv_f16_m16" and k.grid == (10, 1, 1) and k.block == 128


def test_weight_type_table_matches_gguf_block_sizes():
    for name, unit in UNIT_BYTES.items():
        qt = getattr(gguf.GGMLQuantizationType, name.upper())
        block, size = gguf.GGML_QUANT_SIZES[qt]
        assert unit == 256 // block * size and qtype_name(qt) == name
    with pytest.raises(ValueError):
        qtype_name(gguf.GGMLQuantizationType.Q4_0)


def test_bench_runs_on_the_cpu_engine_and_prints_the_ladder(tiny_gguf):
    """`qtui bench` end to end on the reference engine (the CUDA numbers come from the GPU witness)."""
    import argparse

    from qtui.tools import bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args([str(tiny_gguf), "--engine", "cpu", "--steps", "2", "--ladder", "1,2",
                              "--prompt-len", "5", "--max-context", "32"])
    result = bench.run_bench(args)
    assert [row["c"] for row in result["ladder"]] == [1, 2]
    assert all(row["aggregate_tok_s"] > 0 for row in result["ladder"])
    assert result["prefill"]["prompt_tokens"] == 5 and result["weight_bytes_per_token"] > 0
    table = bench.format_table(result)
    assert "single-stream decode" in table and "TTFT" in table
