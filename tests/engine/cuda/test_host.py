"""Host-side parts of the CUDA engine that run anywhere (CI has no GPU): error mapping, engine availability,
argument packing, token tiles and the shape-only K split, the weight-type table."""

from __future__ import annotations

import math
import os

import gguf
import numpy as np
import pytest

from qtui.engine.cuda import driver as drv
from qtui.engine.cuda import kernels
from qtui.engine.cuda.kernels import (
    FMA_BUCKETS,
    MAX_PASS_TOKENS,
    MMA_GEMV_TARGET_BLOCKS,
    MMA_MAX_CLUSTER,
    MMA_RESIDENT_BLOCKS,
    MMA_RING_NT,
    MMA_TARGET_BLOCKS,
    MMA_TOKEN_TILES,
    MMA_TYPES,
    UNIT_BYTES,
    KernelTable,
    Split,
    fma_bucket,
    mma_blocks_per_group,
    mma_groups,
    mma_token_tiles,
    qtype_name,
)
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


def test_ptx_variants_are_searched_in_order_and_fall_back_to_the_committed_build(tmp_path, monkeypatch):
    whole, part = tmp_path / "whole", tmp_path / "part"
    whole.mkdir(), part.mkdir()
    for d in (whole, part):
        (d / "gemv_q4_k.ptx").write_text(d.name)
    (whole / "norms.ptx").write_text("whole")
    monkeypatch.setenv("QTUI_PTX_DIR", os.pathsep.join([str(part), str(whole)]))
    assert drv.ptx_path("gemv_q4_k") == part / "gemv_q4_k.ptx"  # the first directory wins
    assert drv.ptx_path("norms") == whole / "norms.ptx"  # then the next
    assert drv.ptx_path("sampling") == drv.PTX_DIR / "sampling.ptx"  # then ptx/
    monkeypatch.delenv("QTUI_PTX_DIR")
    assert drv.ptx_path("gemv_q4_k") == drv.PTX_DIR / "gemv_q4_k.ptx"


def test_kernel_prepacks_one_cell_per_argument():
    k = drv.Kernel(
        None, "k", (3, 1, 1), 128, [(0xDEAD0000, np.uint64), (7, np.int32), (2.5, np.float32), (1 << 40, np.int64)]
    )
    assert [c.dtype for c in k.cells] == [np.uint64, np.int32, np.float32, np.int64]
    assert [c[0] for c in k.cells] == [0xDEAD0000, 7, 2.5, 1 << 40]
    assert k.params.tolist() == [c.ctypes.data for c in k.cells]  # the void** array the driver reads


def test_launch_config_carries_pdl_and_the_cluster_shape():
    """cuLaunchKernelEx's attributes: programmatic serialization for PDL sites, the cluster dimension (blocks
    along x) for clustered ones; a cluster that does not divide the grid is refused at construction."""
    from cuda.bindings import driver as cu

    ids = cu.CUlaunchAttributeID
    cfg = drv.Kernel(None, "k", (10, 2, 1), 256, [], cluster=5)._launch_config()
    assert [a.id for a in cfg.attrs] == [
        ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    ]
    dim = cfg.attrs[1].value.clusterDim
    assert (dim.x, dim.y, dim.z) == (5, 1, 1) and cfg.numAttrs == 2
    cfg = drv.Kernel(None, "k", (10, 2, 1), 256, [], pdl=False, cluster=2)._launch_config()
    assert [a.id for a in cfg.attrs] == [ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION]
    assert drv.Kernel(None, "k", (10, 2, 1), 256, [])._launch_config().numAttrs == 1
    with pytest.raises(AssertionError):
        drv.Kernel(None, "k", (10, 1, 1), 256, [], cluster=4)


def test_fma_bucket_is_smallest_instantiation_at_least_m_then_16_row_groups():
    for m in range(1, 300):
        b = fma_bucket(m)
        assert b in FMA_BUCKETS and (b >= m or b == 16) and all(x < m for x in FMA_BUCKETS if x < b)


def test_mma_token_tiles_cover_m_with_fewest_tiles_then_64_token_passes():
    for m in range(1, MAX_PASS_TOKENS + 1):
        nt = mma_token_tiles(m)
        assert 8 * nt >= m and (nt == 1 or 4 * nt < m)
    assert all(mma_token_tiles(m) == MMA_TOKEN_TILES[-1] for m in range(MAX_PASS_TOKENS + 1, 300))


def test_k_split_depends_on_the_shape_only_and_fills_the_gpu():
    """B (blocks per tile group) is a function of (groups, super-blocks): the same for every m, so every row
    count computes each column with one fixed sum order (DESIGN invariant 7)."""
    assert [mma_groups(t) for t in (1, 8, 9, 160)] == [1, 1, 2, 20] and mma_groups(9, 2) == 3
    for groups, n_sb in ((20, 36), (20, 16), (8, 14), (97, 10), (1940, 10), (1, 1), (1, 40)):
        b = mma_blocks_per_group(groups, n_sb)
        assert 1 <= b <= n_sb
        assert b == 1 or groups * b >= MMA_TARGET_BLOCKS or b == n_sb
        assert groups >= MMA_TARGET_BLOCKS or groups * b >= min(MMA_TARGET_BLOCKS, groups * n_sb)


def test_k_parts_of_a_group_launch_as_one_cluster_when_the_grid_is_one_wave(monkeypatch):
    """The B blocks of a tile group are one cluster (blocks group*B .. group*B + B-1: their partials are summed
    over distributed shared memory) when B fits a cluster and the grid is resident at once; otherwise, and with
    QTUI_MMA_CLUSTER=0, they launch unclustered (the L2 handshake). Never a function of anything but the grid."""
    kt = KernelTable(dry=True)
    for n_out, n_in, m in ((1024, 3584, 1), (2560, 4096, 1), (12352, 2560, 1), (248320, 2560, 1), (1024, 3584, 64)):
        *_, k = kt.gemv(qtype="q4_k", w=1, x=Split(1 << 20, 1 << 21, n_in), outputs=[(3, n_out)], m=m)
        blocks = mma_blocks_per_group(mma_groups(-(-n_out // 16)), n_in // 256, MMA_GEMV_TARGET_BLOCKS)
        one_wave = k.grid[0] * k.grid[1] <= MMA_RESIDENT_BLOCKS
        decode_tiles = mma_token_tiles(m) <= MMA_RING_NT
        assert k.cluster == (blocks if 1 < blocks <= MMA_MAX_CLUSTER and one_wave and decode_tiles else 1)
        assert k.grid[0] % k.cluster == 0
    assert kt.gemv(qtype="q4_k", w=1, x=Split(1, 2, 3584), outputs=[(3, 1024)], m=1)[0].cluster > 1  # 0.8b ffn down
    stage, gemm = kt.gemv(qtype="q4_k", w=1, x=Split(1, 2, 2560), outputs=[(3, 12352)], m=256)  # 4 GEMM passes
    assert stage.cluster == gemm.cluster == 1 and gemm.grid == (388, 1, 1)  # a block per tile group and pass
    (s,) = kt.swiglu_gemv(qtype="q4_k", w_gate=1, w_up=2, x=Split(1, 2, 1024), act=Split(3, 4, 3584), m=3)
    assert s.cluster == mma_blocks_per_group(56, 4) > 1  # 0.8b gate + up
    monkeypatch.setenv("QTUI_MMA_CLUSTER", "0")
    assert kt.gemv(qtype="q4_k", w=1, x=Split(1, 2, 3584), outputs=[(3, 1024)], m=1)[0].cluster == 1


def test_serial_k_split_only_for_large_tiles_and_well_filled_waves(monkeypatch):
    """One block walks all K parts (1 block per group) only above the ring's token tiles, with more than one part,
    and when the serial grid uses >= MMA_SERIAL_MIN_FILL of its waves' resident slots; QTUI_MMA_SERIAL_NT=99
    (read at import) keeps the parallel split everywhere. The K parts themselves never change (the test above)."""
    lb, waves = kernels.mma_launch_blocks, kernels.MMA_RESIDENT_BLOCKS
    assert lb(4, 2, 97, 2) == 1  # 194 blocks: 73 % of one wave
    assert lb(4, 3, 64, 2) == 3  # 128 blocks: 48 %
    assert lb(4, 3, 144, 2) == 3  # 288 blocks: a second wave for 24 blocks
    assert lb(4, 3, 64, 8) == 1 and lb(4, 7, 20, 8) == 1  # 512 and 160 blocks
    assert lb(4, 1, 97, 8) == 1 and lb(2, 5, 200, 1) == 5 and lb(1, 5, 200, 1) == 5  # ring tiles: never serial
    for grid in range(1, 3 * waves):
        fill = grid / (waves * -(-grid // waves))
        assert (lb(4, 3, grid, 1) == 1) == (fill >= kernels.MMA_SERIAL_MIN_FILL)
    monkeypatch.setattr(kernels, "MMA_SERIAL_NT", 99)
    assert lb(4, 2, 97, 2) == 2


def test_gemm_blocks_share_out_the_units_where_the_cost_model_says(monkeypatch):
    """gemm_blocks: a block per tile group and pass (nothing cut) unless sharing the units out over one block per
    SM saves more than GEMM_CUT_UNITS; never more blocks than units; fewer where the cut parts' scratch is short."""
    gb = kernels.gemm_blocks
    assert kernels.GEMM_CUT_UNITS == 4
    assert gb(1, 97, 10, 2) == 97 and gb(4, 97, 10, 2) == 388  # 4b qkv: 10 vs 8 + 4 units per SM; 30 vs 30 + 4
    assert gb(1, 80, 10, 2) == 80  # 4b attention q + k + v: 10 vs 7 + 4
    assert gb(1, 33, 10, 2) == 132 and gb(1, 64, 10, 2) == 132  # 4b z + b + a; q6_k qkv: 10 vs 3 + 4, 5 + 4
    assert gb(1, 144, 10, 3) == 132 and gb(4, 144, 10, 3) == 132  # 4b gate + up: 20 vs 11 + 4; 50 vs 44 + 4
    assert gb(1, 20, 36, 7) == 132 and gb(4, 20, 36, 7) == 132  # 4b ffn down: 36 vs 6 + 4 (m = 256: 22 + 4)
    assert gb(1, 20, 16, 7) == 132 and gb(4, 20, 16, 7) == 132  # 4b ssm out: 16 vs 3 + 4; m = 256: 16 vs 10 + 4
    assert gb(1, 1940, 10, 2) == 1940  # 4b LM head: 150 vs 147 + 4
    monkeypatch.setattr(kernels, "GEMM_CUT_UNITS", -(10**6))  # always shared out
    assert gb(1, 1, 3, 3) == 3 and gb(1, 97, 10, 2) == 132  # at most one block per unit
    monkeypatch.setattr(kernels, "SCRATCH_BYTES", 4 * kernels.gemm_scratch_floats(10, 2) * 50)
    assert gb(1, 97, 10, 2) == 50  # the scratch of 50 blocks' cut parts and groups


def test_projection_pairs_share_the_sms_by_cost_in_one_pass_steps():
    """KernelTable.projections on the 4b's shapes: a Q6_K qkv (64 tile groups) beside a Q4_K z + b + a (33) at m = 64
    runs as a pair (GEMM_PAIR_FIRST, then SECOND) on 94 + 38 of the 132 SMs (groups x GEMM_UNIT_COST), both whole
    there (10 units a block: no fold launch); a 256-row chunk (4 passes), an unstaged x and one weight type run
    one launch after the other as before."""
    kt = KernelTable(dry=True)
    staged = Split(1, 2, 2560, 3)
    two = [("q6_k", 10, [(11, 8192)]), ("q4_k", 20, [(21, 4096), (22, 32), (23, 32)])]
    first, second = kt.projections(x=staged, launches=two, m=64)
    assert (first.name, second.name) == ("mma_gemm_q6_k", "mma_gemm_q4_k")
    assert [int(k.cells[-1][0]) for k in (first, second)] == [kernels.GEMM_PAIR_FIRST, kernels.GEMM_PAIR_SECOND]
    assert (first.grid[0], second.grid[0]) == (64, 33)  # whole: 10 units a block against 7 + 4 and 9 + 4
    assert int(second.cells[-2][0]) - int(first.cells[-2][0]) == kernels.SCRATCH_BYTES // 2  # their own scratch
    for m, x, launches in ((256, staged, two), (64, Split(1, 2, 2560), two), (64, staged, two[1:])):
        gemms = [k for k in kt.projections(x=x, launches=launches, m=m) if k.name.startswith("mma_gemm")]
        assert all(int(k.cells[-1][0]) == kernels.GEMM_ALONE for k in gemms), (m, x, len(launches))


def test_gemv_sites_choose_kernels_by_type_and_rows(monkeypatch):
    """Quant types go to ptx/mma.cuh (tiles x K split blocks, 8 - 32-token passes) below GEMM_MIN_ROWS rows and
    to the 64-token GEMM of ptx/gemm.cuh from there on (x staged first; a fold launch after a GEMM whose shared-out
    units cut tile groups: a block per pass and group, per token tile but for the SwiGLU, with the GEMM's blocks
    and its arguments after x); float types keep the FMA path over 16-row groups. The K split (the `parts`
    argument) never changes with m; the GEMM runs one block per SM over all passes (fewer where there are fewer
    units of work)."""
    kt = KernelTable(dry=True)
    x = Split(1 << 20, 1 << 21, 9216)
    parts = mma_blocks_per_group(20, 36, MMA_GEMV_TARGET_BLOCKS)
    assert parts > 1 and kernels.GEMM_MIN_ROWS == 9
    for qtype in MMA_TYPES:
        for m, nt, passes in ((1, 1, 1), (8, 1, 1)):
            (k,) = kt.gemv(qtype=qtype, w=1, x=x, outputs=[(3, 2560)], m=m, res=3)
            assert k.name == f"mma_gemv_{qtype}_n{nt}" and k.grid[1] == passes and k.block == 256 and k.pdl
            assert k.grid[0] == 20 * parts and int(k.cells[-3][0]) == parts  # 20 groups: the K split in parallel
        for m, passes in ((9, 1), (16, 1), (17, 1), (32, 1), (33, 1), (64, 1), (65, 2), (256, 4)):
            stage, k, fold = kt.gemv(qtype=qtype, w=1, x=x, outputs=[(3, 2560)], m=m, res=3)
            n32 = "_n32" if m <= 32 else ""
            assert stage.name == "gemm_stage_x" and stage.grid == (passes, 36, 5) and stage.pdl
            assert k.name == f"mma_gemm_{qtype}{n32}" and k.grid == (132, 1, 1)
            assert k.block == 256 and k.pdl
            assert k.shmem == kernels.gemm_smem_bytes(qtype) <= 227 << 10 and int(k.cells[-3][0]) == parts
            assert int(k.cells[-1][0]) == kernels.GEMM_ALONE  # (not one of a pair)
            assert fold.name == f"gemm_fold{n32}" and fold.grid == (20 * passes, 4 if n32 else 8, 1) and fold.pdl
            assert [int(c[0]) for c in fold.cells] == [132, *(int(c[0]) for c in k.cells[2:-1])]  # (no pair place)
        (k,) = kt.swiglu_gemv(qtype=qtype, w_gate=1, w_up=2, x=Split(1, 2, 2560), act=Split(3, 4, 9216), m=3)
        assert k.name == f"mma_swiglu_{qtype}_n1" and k.grid == (144 * mma_blocks_per_group(144, 10), 1, 1)
        stage, k, fold = kt.swiglu_gemv(qtype=qtype, w_gate=1, w_up=2, x=Split(1, 2, 2560), act=Split(3, 4, 9216), m=64)
        assert k.name == f"mma_gemm_swiglu_{qtype}" and int(k.cells[-3][0]) == mma_blocks_per_group(144, 10)
        assert k.grid == (132, 1, 1)  # 1440 units shared out: 11 + GEMM_CUT_UNITS per SM against 2 waves of 10
        assert fold.name == "gemm_fold_swiglu" and fold.grid == (144, 2, 1)  # halves of the tokens
        assert [int(c[0]) for c in fold.cells] == [132, *(int(c[0]) for c in k.cells[3:])]
        stage, k, fold = kt.swiglu_gemv(qtype=qtype, w_gate=1, w_up=2, x=Split(1, 2, 2560), act=Split(3, 4, 9216), m=20)
        assert k.name == f"mma_gemm_swiglu_{qtype}_n32" and stage.grid == (1, 10, 5)  # the 32-token form
        assert fold.name == "gemm_fold_swiglu_n32"
    small = Split(1, 2, 1024)  # 0.8b ffn down shape (64 tiles, 14 super-blocks): 896 units
    assert kernels.GEMM_SMALL_GEMV_ROWS == 8  # every launch of GEMM_MIN_ROWS (9) rows or more runs as the GEMM
    for m in (9, 16, 17, 64, 256):  # the GEMM, its folds (down: tile groups cut, so a stage and a fold launch)
        assert len(kt.gemv(qtype="q4_k", w=1, x=Split(1, 2, 3584), outputs=[(3, 1024)], m=m)) == 3
        assert len(kt.swiglu_gemv(qtype="q4_k", w_gate=1, w_up=2, x=small, act=Split(3, 4, 3584), m=m)) == 2
    assert kernels.uses_gemm(9, 1, 1) and not kernels.uses_gemm(8, 10**6, 64)
    monkeypatch.setattr(kernels, "GEMM_SMALL_GEMV_ROWS", 16)  # QTUI_GEMM_SMALL_GEMV_ROWS=16: small launches' GEMV
    for m, down, gate_up in ((9, 1, 1), (16, 1, 1), (17, 3, 2), (65, 3, 2)):  # the GEMV up to 16 rows
        assert len(kt.gemv(qtype="q4_k", w=1, x=Split(1, 2, 3584), outputs=[(3, 1024)], m=m)) == down
        assert len(kt.swiglu_gemv(qtype="q4_k", w_gate=1, w_up=2, x=small, act=Split(3, 4, 3584), m=m)) == gate_up
    assert kernels.uses_gemm(16, 40, 8) and not kernels.uses_gemm(16, 39, 8) and kernels.uses_gemm(17, 1, 1)
    assert not kernels.uses_gemm(8, 10**6, 64) and kernels.uses_gemm(9, 40, 8)
    (k,) = kt.gemv(qtype="q4_k", w=1, x=Split(1, 2, 3584), outputs=[(3, 1024)], m=16)  # small: the GEMV's NT = 2
    assert k.name == "mma_gemv_q4_k_n2"
    monkeypatch.setattr(kernels, "GEMM_SMALL_GEMV_ROWS", 8)
    monkeypatch.setattr(kernels, "GEMM_NARROW_ROWS", 0)  # QTUI_GEMM_NARROW_ROWS=0: the 64-token form from 17 rows
    (_, k, _) = kt.gemv(qtype="q4_k", w=1, x=x, outputs=[(3, 2560)], m=17, res=3)
    assert k.name == "mma_gemm_q4_k"
    monkeypatch.setattr(kernels, "GEMM_MIN_ROWS", 1 << 20)  # QTUI_GEMM_MIN_ROWS: the GEMM off
    (k,) = kt.gemv(qtype="q4_k", w=1, x=x, outputs=[(3, 2560)], m=256, res=3)
    assert k.name == "mma_gemv_q4_k_n4" and k.grid == (20, 8, 1)  # 160 blocks: 61 % of 264 slots, serial
    (k,) = kt.gemv(qtype="f16", w=1, x=Split(1, 2, 512), outputs=[(3, 40)], m=40, res=0)
    assert k.name == "gemv_f16_m16" and k.grid == (10, 3, 1) and k.block == 128
    assert not kt.embed(qtype="q6_k", m=2, table=1, tokens=2, out=3, n_embd=256).pdl  # a step's first kernel


def test_weight_type_table_matches_gguf_block_sizes():
    for name, unit in UNIT_BYTES.items():
        qt = getattr(gguf.GGMLQuantizationType, name.upper())
        block, size = gguf.GGML_QUANT_SIZES[qt]
        assert unit == 256 // block * size and qtype_name(qt) == name
    with pytest.raises(ValueError):
        qtype_name(gguf.GGMLQuantizationType.IQ2_XXS)  # a type with no kernel


def test_bench_runs_on_the_cpu_engine_and_prints_the_ladder(tiny_gguf):
    """`qtui bench` end to end on the reference engine (the CUDA numbers come from the GPU witness)."""
    import argparse

    from qtui.tools import bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        [
            str(tiny_gguf),
            "--engine",
            "cpu",
            "--steps",
            "2",
            "--ladder",
            "1,2",
            "--prompt-len",
            "5",
            "--max-context",
            "32",
        ]
    )
    result = bench.run_bench(args)
    assert [row["c"] for row in result["ladder"]] == [1, 2]
    assert all(row["aggregate_tok_s"] > 0 for row in result["ladder"])
    assert result["prefill"]["prompt_tokens"] == 5 and result["weight_bytes_per_token"] > 0
    assert result["burst"]["prompts"] == 2 and result["burst"]["longest"] == 31  # (within the 32-token context)
    assert result["burst"]["one_call_each_ms"] > 0 and "prefill_batch_ms" not in result["burst"]  # (numpy: none)
    table = bench.format_table(result)
    assert "single-stream decode" in table and "TTFT" in table and "% floor" in table
    assert all(math.isnan(row["floor_step_ms"]) for row in result["ladder"])  # no bandwidth measured on the CPU
    from qtui.tools import bench_compare  # the comparison reads what run_bench writes

    ratios = [ln.split()[-1] for ln in bench_compare.compare([result, result]).splitlines()[1:]]
    assert len(ratios) >= 5 and set(ratios) == {"1.000x"}


def test_producers_stage_the_gemm_x_where_a_gemm_reads_it(monkeypatch):
    """KernelTable.staged / swiglu_out: from GEMM_MIN_ROWS rows an x of whole super-blocks is staged by its producer
    (into gemm_x; the SwiGLU GEMM's act into gemm_act), and a GEMM reading it has no gemm_stage_x and reads that
    buffer; fewer rows, a GEMV SwiGLU, or QTUI_PRODUCERS_STAGE=0 leave x as it was (the GEMM then stages it)."""
    kt = KernelTable(dry=True)
    kt.gemm_x, kt.gemm_act = 1 << 40, 1 << 41  # (no buffers: only the arguments are looked at)
    x, act = Split(1 << 20, 1 << 21, 2560), Split(1 << 22, 1 << 23, 9216)
    assert kt.staged(x, 8) == x and kt.staged(Split(1, 2, 2560 + 16), 64).gx == 0
    for m in (9, 17, 64, 256):
        xs = kt.staged(x, m)
        assert xs.gx == kt.gemm_x and (xs.xs, xs.xsum, xs.n) == (x.xs, x.xsum, x.n)
        k, *_fold = kt.gemv(qtype="q4_k", w=1, x=xs, outputs=[(3, 9216)], m=m)  # the GEMM (and its fold) alone
        assert k.name.startswith("mma_gemm_q4_k") and int(k.cells[1][0]) == kt.gemm_x
        stage, k, *_fold = kt.gemv(qtype="q4_k", w=1, x=x, outputs=[(3, 9216)], m=m)  # not staged: restaged first
        assert stage.name == "gemm_stage_x" and int(k.cells[1][0]) == kt.gemm_x
        sw, *fold = kt.swiglu_gemv(qtype="q4_k", w_gate=1, w_up=2, x=xs, act=act, m=m)  # shared out at every m
        assert sw.name.startswith("mma_gemm_swiglu_q4_k") and int(sw.cells[-1][0]) == kt.gemm_act
        assert len(fold) == 1 and all(int(f.cells[-1][0]) == kt.gemm_act for f in fold)  # a fold stages too
        down = kt.swiglu_out(x=xs, act=act, m=m)
        assert down.gx == kt.gemm_act
        k, _ = kt.gemv(qtype="q6_k", w=1, x=down, outputs=[(3, 2560)], m=m)
        assert k.name.startswith("mma_gemm_q6_k") and int(k.cells[1][0]) == kt.gemm_act
    assert kt.swiglu_out(x=x, act=act, m=3) == act  # the GEMV SwiGLU stages nothing
    monkeypatch.setattr(kernels, "PRODUCERS_STAGE", False)
    assert kt.staged(x, 64) == x and kt.swiglu_out(x=x, act=act, m=64) == act
