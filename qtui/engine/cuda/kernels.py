"""The kernel table: one builder per PTX entry, each stating its grid and tensor shapes, keyword arguments only.

Every builder returns a `Kernel` launch site whose arguments are fixed device pointers (per-step values such
as token ids, slot ids and positions are read by the kernels from fixed device buffers), so a list of launch
sites is one step: launched eagerly, or captured once into a CUDA graph and replayed. Every site but the first
of a step is launched with Programmatic Dependent Launch (ptx/common.cuh).

The argument lists here ARE the Python side of the PTX ABI: tests/engine/cuda/test_abi.py builds every site
dry (no GPU) and checks each against the `.entry` signature in the committed ptx/*.ptx.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from qtui.engine.cuda.driver import DeviceBuffer, Kernel, KernelArg, check, load_module
from qtui.engine.cuda.repack import TILED_TYPES, n_tiles
from qtui.engine.cuda.repack import UNIT_BYTES as TILED_UNIT_BYTES

P, I32, I64, F32 = np.uint64, np.int32, np.int64, np.float32

# Constants shared with ptx/ (the single Python statement of each; the ABI test reads the .cu defines).
ATTN_PIECE = 256  # positions per attention piece: ATTN_PIECE in ptx/attention.cu
MAX_CONV = 8  # longest conv kernel: MAX_CONV in ptx/deltanet.cu
# Rows of a prefill run one thread of the conv kernel walks (>= MAX_CONV - 1): a 256-row chunk in 16 segments,
# 16x the threads of one walk over the run (ptx/deltanet.cu conv_step_silu; the same bits however it is cut).
CONV_SEG_ROWS = 16
# Decode steps (runs of one row) go through conv_step_silu_rows: CONV_DECODE_ROWS rows a thread, their loads in flight
# together (ptx/deltanet.cu CONV_DECODE_ROWS); QTUI_CONV_DECODE_ROWS=0 gives conv_step_silu back (A/B runs).
CONV_DECODE_ROWS = 4
CONV_DECODE_KERNEL = os.environ.get("QTUI_CONV_DECODE_ROWS", "4") != "0"
MAX_HEAD_DIM = 256  # the attention kernels keep one head in 256 threads / floats of shared memory
# attn_partial_run (ptx/attention.cu: a prefill run's attention): (row, head) queries of one KV head per block,
# and keys per K / V tile in shared memory
ATTN_RUN_THREADS = 512
ATTN_RUN_QUERIES = 32
ATTN_RUN_KEYS = 32
ATTN_RUN = os.environ.get("QTUI_ATTN_RUN", "1") != "0"  # 0: prefill runs through attn_partial too (A/B runs)
MMA_WARPS = 8  # ptx/mma.cuh: warps per block, each a K part
MMA_THREADS = 32 * MMA_WARPS
MMA_RING_WARP_BYTES = 10240  # ptx/mma.cuh: a warp's weight ring holds at most this many bytes of units
MMA_RING_NT = 2  # ptx/mma.cuh: token tiles up to which the GEMVs stream weights through the ring
# NT instantiations: 8*NT tokens per pass. NT = 8 (64-token passes) was dropped: at m = 64 and in 256-token
# prefill chunks two or eight 32-token passes were faster on every 4b shape (ptx/PERF.md, "The serial K split").
MMA_TOKEN_TILES = (1, 2, 4)
MAX_PASS_TOKENS = 8 * MMA_TOKEN_TILES[-1]  # tokens one pass of a tensor-core GEMV holds (32)
# Blocks a tensor-core GEMV aims for (3 resident per SM at NT = 1 on the 132-SM H200): matrices with fewer tile
# groups split K across blocks. A constant, not read from the device, so the arithmetic is the same on every GPU.
MMA_TARGET_BLOCKS = 3 * 132
# plain GEMVs: fewer K parts, one wave, clustered (PERF.md, "Split-K over distributed shared memory");
# QTUI_MMA_GEMV_TARGET_BLOCKS=396 gives main's split back (A/B runs: tests/engine/cuda/ab_run.sh)
MMA_GEMV_TARGET_BLOCKS = int(os.environ.get("QTUI_MMA_GEMV_TARGET_BLOCKS", "132"))
# The serial K split (ptx/mma.cuh mma_warp): one block walks all K parts of its tile group in order instead of B
# blocks each taking one, when the token tiles are large (NT >= MMA_SERIAL_NT, above MMA_RING_NT: the ring's slots
# would have to hold the running sum) and the serial grid fills its last wave of resident blocks to at least
# MMA_SERIAL_MIN_FILL (a 288-block grid on 264 slots runs a second wave for 24 blocks, as long as the first).
# Measured on the 4b shapes (PERF.md): qkv m = 64 82 -> 77 us, m = 256 342 -> 231 us. Speed only: the same sums.
# QTUI_MMA_SERIAL_NT=99 turns it off (A/B runs).
MMA_SERIAL_NT = int(os.environ.get("QTUI_MMA_SERIAL_NT", "4"))
MMA_SERIAL_MIN_FILL = 0.6
# Decode steps of at least this many rows run the delta rule through the prefill pipeline too (kernels.py
# delta_rule: the same bits either way); QTUI_DELTA_PIPELINE_MIN_ROWS for A/B runs.
DELTA_PIPELINE_MIN_ROWS = int(os.environ.get("QTUI_DELTA_PIPELINE_MIN_ROWS", str(1 << 30)))
# The decode delta rule (ptx/deltanet.cu delta_step) is persistent: this many blocks walk its (head, row) items,
# each item's 64 KB (d_k 128) state bulk-copied two items ahead. One block per SM at d_k = 128 (two state buffers,
# 128 KB of shared memory), three at 64. With one block per item (H_v x m blocks), 16 waves of load - compute -
# store at m = 64 ran the 4b layer in 100 us (2.7 TB/s of state traffic).
DELTA_STEP_BLOCKS = {64: 3 * 132, 128: 132}
# A decode step's conv runs inside the delta rule (ptx/deltanet.cu delta_conv_step: the same bits as
# conv_step_silu_rows + delta_step, one launch where two were) for conv kernels of DELTA_CONV_K taps (Qwen3.5's 4);
# QTUI_DELTA_CONV=0 gives the two launches back (A/B runs).
DELTA_CONV_K = 4
DELTA_CONV = os.environ.get("QTUI_DELTA_CONV", "1") != "0"
# ... for steps of at least this many rows: a (row, k-head) item runs its H_v / H_k heads one after another, which
# costs a small step its latency (4b, H100: the m = 1 step +49 us, m = 64 -94 us); from 8 rows the 4b's m x 16
# items fill the SMs.
DELTA_CONV_MIN_ROWS = int(os.environ.get("QTUI_DELTA_CONV_MIN_ROWS", "8"))


@dataclass(frozen=True, slots=True)
class ConvIn:
    """The causal conv before the delta rule: its input x [m][C] (the projection), weights [C][K], the layer's
    state pool (slot_stride floats a slot) and K, the kernel size."""

    x: int
    w: int
    state: int
    slot_stride: int
    kernel: int


def delta_step_smem_bytes(d_k: int) -> int:
    """The decode delta kernels' dynamic shared memory: two d_k x d_k float32 state buffers and their two mbarriers,
    then a third buffer the states leave through (ptx/deltanet.cu DELTA_BULK_STORE)."""
    return 3 * d_k * d_k * 4 + 16


# The 64-token GEMM (ptx/gemm.cuh: warpgroup MMAs over a staged x tile, one block per SM): GEMV launches of at
# least GEMM_MIN_ROWS rows run as gemm_stage_x + mma_gemm_* (the same bits, tests/engine/cuda/test_gemv.py);
# QTUI_GEMM_MIN_ROWS=1000000 turns it off (A/B runs). From 17 rows (1fa24a5, H200, 4b): the 32-row step 10.8 ->
# 8.7 ms (c = 32 2972 -> 3682 tok/s, c = 24 2564 -> 2950) against the GEMV's 32-token passes (NT = 4). From 9 rows
# since the GEMM's 32-token form: at bf2d4d9 (H200) the 16-row step on the GEMV (5.07 ms) was slower than the
# 32-row step on the GEMM (4.69 ms), whose MMA work is the same at 9 - 32 rows (ptx/PERF.md, session 12).
GEMM_TOKENS = 64  # ptx/split.cuh GEMM_TOKENS: tokens per pass
GEMM_STAGES = int(os.environ.get("QTUI_GEMM_STAGES", "2"))  # ptx/gemm.cuh GEMM_STAGES (a variant build: its own)
GX_MAT = 2048  # ptx/split.cuh GX_MAT: one staged x matrix (64 tokens x k16, bf16)
GX_CHUNK = 37 * GX_MAT  # ptx/split.cuh GX_CHUNK: staged bytes of one pass and super-block
GEMM_MIN_ROWS = int(os.environ.get("QTUI_GEMM_MIN_ROWS", "9"))
# Launches of at most this many rows (one pass) run the GEMM's 32-token form (mma_gemm_*_n32: m64n32k16, half the
# MMA work of a 64-token pass for the same bits); QTUI_GEMM_NARROW_ROWS=0 turns it off (A/B runs).
GEMM_NARROW_ROWS = int(os.environ.get("QTUI_GEMM_NARROW_ROWS", "32"))
# The producers of a GEMM's x (rmsnorm, the delta rule, attn_combine, the SwiGLU GEMM) stage it themselves
# (KernelTable.staged, swiglu_out), so the GEMM runs without gemm_stage_x: the same bytes (tests/engine/cuda/
# test_staged.py). QTUI_PRODUCERS_STAGE=0: off (A/B runs).
PRODUCERS_STAGE = os.environ.get("QTUI_PRODUCERS_STAGE", "1") != "0"
# Up to GEMM_SMALL_GEMV_ROWS rows the GEMM pays only on launches of at least GEMM_DECODE_MIN_UNITS 16-row x 256-value
# units (tile groups x 8 tiles x super-blocks): one block per SM loses to the GEMV's two on small matrices (the 0.8b
# c = 16: 7891 tok/s on the GEMV, 7165 with every launch on the GEMM; H200, session 15); the 4b's per-layer matrices
# have 2560 - 11520, its 2560-unit ssm and attention outputs shared out over all SMs (gemm_blocks). Above it every
# launch runs as the GEMM (session 15, against the GEMV's NT = 4 passes: the 0.8b m = 64 step 4557 -> 3192 us on an
# H200, c = 64 13557 -> 19072 tok/s; at 16 rather than 32 on an H100 the 0.8b c = 20 / 24 / 32 5727 / 6711 / 8435 ->
# 11017 / 13079 / 16661 tok/s and the 4b's +2 - 3 %, c = 16 unchanged). QTUI_GEMM_DECODE_MIN_UNITS,
# QTUI_GEMM_SMALL_GEMV_ROWS. Since then the GEMM got faster: 8 (every launch of 9+ rows on the GEMM) gives the 0.8b
# c = 12 / 16 6310 / 8096 -> 8327 / 10775 tok/s (+32 %), the 4b +0.6 - 0.9 % (H200, session 28).
GEMM_DECODE_MIN_UNITS = int(os.environ.get("QTUI_GEMM_DECODE_MIN_UNITS", "2560"))
GEMM_SMALL_GEMV_ROWS = int(os.environ.get("QTUI_GEMM_SMALL_GEMV_ROWS", "8"))
# one GEMM block per SM (200+ registers per thread); QTUI_GEMM_RESIDENT_BLOCKS: variant builds (gemm_variants.sh)
GEMM_RESIDENT_BLOCKS = int(os.environ.get("QTUI_GEMM_RESIDENT_BLOCKS", "132"))
# gemm_blocks' cost of cutting, in units: 4 since the fold launch (session 14, 4b, H100, against 8: the m = 64 step
# -1.9 %, a 256-token prefill chunk -2.8 %; 6: -1.5 %; 2 in session 11: c = 64 -1 %, cutting attention's q + k + v
# and the LM head too)
GEMM_CUT_UNITS = int(os.environ.get("QTUI_GEMM_CUT_UNITS", "4"))
# A layer's projections of two weight types (the 4b's Q6_K qkv beside its Q4_K z + b + a) as two GEMMs side by side,
# each on its share of the SMs (ptx/gemm.cuh GEMM_PAIR_*), where they ran one after the other; 0: off (A/B)
GEMM_PAIRS = os.environ.get("QTUI_GEMM_PAIRS", "1") != "0"
# The most rows of a paired launch: one pass (a 512-token prefill ran 4 % slower paired, H100)
GEMM_PAIR_MAX_ROWS = int(os.environ.get("QTUI_GEMM_PAIR_MAX_ROWS", str(GEMM_TOKENS)))
# A GEMM unit's time by type, relative (probe/gemm_trace.py, 4b, m = 64, H100: q4_k 2.07 us, q6_k 2.65): a pair's
# SMs are shared in proportion to its GEMMs' units times these
GEMM_UNIT_COST = {"q6_k": 1.28}
GEMM_X_BYTES = 32 << 20  # the staged activations of one GEMM (256 rows x K 16384 fit)
GEMM_FOLD_MAX_SLABS = 256  # ptx/gemm.cuh GEMM_FOLD_MAX_SLABS: a cut tile group's slabs (K parts + super-blocks)
GEMM_FOLD_SWIGLU_SPLIT = 2  # ptx/gemm.cuh: the 64-token SwiGLU fold's blocks per tile group (halves of its tokens)


MMA_MAX_CLUSTER = 16  # blocks of a thread-block cluster on sm_90 (above 8 with the non-portable size allowed)
MMA_RESIDENT_BLOCKS = 2 * 132  # GEMV blocks resident at once on the H200 (2 per SM: 128 registers per thread)
FMA_BUCKETS = (1, 2, 4, 8, 16)  # the M instantiations of the float-type FMA kernels (ptx/gemv.cuh)
MMA_TYPES = TILED_TYPES  # integer quants: tensor cores over the repacked tiles (ptx/mma.cuh)
GEMV_TYPES = ("f32", "f16", "bf16", *MMA_TYPES)
# Bytes per 256 values in each type's raw GGUF rows.
UNIT_BYTES = {"f32": 1024, "f16": 512, "bf16": 512, **{t: n // 16 for t, n in TILED_UNIT_BYTES.items()}}
# Split-K partials and the per-group arrival counters of the tensor-core GEMVs (shared by every GEMV of a step:
# they run one after another). 192 MiB of partials covers a 256-token chunk of every shape used.
SCRATCH_BYTES = 192 << 20
MAX_COUNTERS = 1 << 16
ATTN_TARGET_BLOCKS = int(os.environ.get("QTUI_ATTN_TARGET_BLOCKS", "528"))  # attn_partial blocks worth launching
ARGMAX_PARTS = 32  # ptx/elementwise.cu: blocks per logits row
ARGMAX_ROWS = 4096  # the last ARGMAX_ROWS counters belong to the argmax (the GEMVs use the first ones)
# Before them, two per GDN layer for the decode delta rule's item claims (ptx/deltanet.cu delta_body: a layer's own,
# so no launch meets another's count); QTUI_DELTA_CLAIMS=0 gives every block its static items (A/B runs).
DELTA_CLAIM_LAYERS = 256
DELTA_CLAIMS_AT = MAX_COUNTERS - ARGMAX_ROWS - 2 * DELTA_CLAIM_LAYERS
DELTA_CLAIMS = os.environ.get("QTUI_DELTA_CLAIMS", "1") != "0"


@dataclass(frozen=True, slots=True)
class Split:
    """An activation in the split format of ptx/split.cuh: xs [rows][n/4] uint4, xsum [rows][n/16] float; gx: the
    GEMM's staged buffer its producer writes as well (KernelTable.staged; 0: none), so that a GEMM reading it
    needs no gemm_stage_x."""

    xs: int
    xsum: int
    n: int
    gx: int = 0

    def row(self, r: int) -> Split:
        """The same buffer from row r on (e.g. the last prompt row for the LM head), not staged."""
        return Split(self.xs + 4 * self.n * r, self.xsum + (self.n // 16) * 4 * r, self.n)


def attn_piece_blocks(n_pieces: int, n_head: int, m: int) -> int:
    """Blocks per (head, row) of attn_partial, each taking every Z-th KV piece: enough for ATTN_TARGET_BLOCKS
    in all (a long context at m = 1 spreads over the SMs), and no more (at m = 64 one block per (head, row) walks
    its pieces; a block per piece of max_ctx left ~20 us per layer in blocks with nothing to do)."""
    return max(1, min(n_pieces, -(-ATTN_TARGET_BLOCKS // (n_head * m))))


def attn_run_grid(n_pieces: int, n_head: int, n_kv: int, m: int) -> tuple[tuple[int, int, int], int]:
    """attn_partial_run's grid (piece blocks, n_kv, row groups) and rows per group: the rows of a group and the
    heads of one KV head fill ATTN_RUN_QUERIES; piece blocks as attn_piece_blocks (a block per KV head and row group
    where attn_partial has one per head and row)."""
    group = n_head // n_kv
    assert 1 <= group <= ATTN_RUN_QUERIES and n_head % n_kv == 0, (n_head, n_kv)
    rows = ATTN_RUN_QUERIES // group
    row_groups = -(-m // rows)
    return (attn_piece_blocks(n_pieces, n_kv, row_groups), n_kv, row_groups), rows


def attn_run_smem_bytes(hd: int) -> int:
    """attn_partial_run's dynamic shared memory: its ring of two K / V tiles and the block's scores of one piece."""
    return 4 * (2 * ATTN_RUN_KEYS * hd + ATTN_RUN_QUERIES * ATTN_PIECE)


def fma_bucket(m: int) -> int:
    """The FMA instantiation M for m rows (m > 16: M = 16 over token groups of 16)."""
    return next((b for b in FMA_BUCKETS if b >= m), FMA_BUCKETS[-1])


def mma_token_tiles(m: int) -> int:
    """NT of the tensor-core kernels for m rows: 8-token tiles per pass (m > MAX_PASS_TOKENS: several passes)."""
    return next((nt for nt in MMA_TOKEN_TILES if 8 * nt >= m), MMA_TOKEN_TILES[-1])


def mma_groups(tiles: int, matrices: int = 1) -> int:
    """Tile groups of a tensor-core launch: one block holds MMA_WARPS / matrices tiles (a warp each)."""
    return -(-tiles // (MMA_WARPS // matrices))


def mma_blocks_per_group(groups: int, n_sb: int, target: int | None = None) -> int:
    """B: blocks sharing one tile group (its K cut into B contiguous parts, summed in the order 0..B-1). A
    function of the matrix SHAPE only, never of m: that is what keeps every row count and every prefill chunk
    bitwise equal (DESIGN invariants 1 and 7)."""
    target = MMA_TARGET_BLOCKS if target is None else target  # read at the call: gemv_speed.py sets it
    if groups >= target:
        return 1
    return max(1, min(-(-target // groups), n_sb))  # at most one block per super-block column


def mma_launch_blocks(nt: int, parts: int, groups: int, passes: int) -> int:
    """Blocks per tile group of a launch with NT token tiles and `parts` K parts over `groups` tile groups and
    `passes` token passes: `parts` (one part each, combined across blocks) or 1 (the serial K split, see
    MMA_SERIAL_NT). A speed choice only: the sums are the same."""
    grid = groups * passes
    fill = grid / (MMA_RESIDENT_BLOCKS * -(-grid // MMA_RESIDENT_BLOCKS))  # the share of its waves' slots it uses
    serial = parts > 1 and nt >= max(MMA_SERIAL_NT, MMA_RING_NT + 1) and fill >= MMA_SERIAL_MIN_FILL
    return 1 if serial else parts


def uses_gemm(m: int, groups: int, n_sb: int) -> bool:
    """Whether a tensor-core launch of m rows over `groups` tile groups and n_sb super-blocks runs as the GEMM: from
    GEMM_MIN_ROWS rows, and up to GEMM_SMALL_GEMV_ROWS rows only for launches of GEMM_DECODE_MIN_UNITS units. Speed
    only."""
    big = groups * MMA_WARPS * n_sb >= GEMM_DECODE_MIN_UNITS
    return m >= GEMM_MIN_ROWS and (m > GEMM_SMALL_GEMV_ROWS or big)


def gemm_blocks(
    passes: int, groups: int, n_sb: int, parts: int, sms: int | None = None, scratch: int | None = None
) -> int:
    """Blocks of a GEMM launch (ptx/gemm.cuh GemmWork: block b takes the b-th of equal contiguous shares of the
    passes x groups x super-blocks units). One block per tile group and pass (nothing cut: the tile group's sum
    stays in one block), unless one block per SM with the units shared out evenly is faster by the cost model:
    waves x super-blocks against units per SM + GEMM_CUT_UNITS (the sums of cut K parts and tile groups meeting
    in scratch, added up by the fold launch after the GEMM). Measured on the H200 (4b, m = 64, us; whole / shared
    out, before the fold launch): ffn down (20 groups x 36 super-blocks) 92 / 43, ssm out (20 x 16) 44 / 26 (the
    GEMV: 52), gate + up (144 x 10) 66 / 59, qkv (97 x 10) 29 / 44. With the fold launch (H100, session 14) the
    4b's small projections gain too: z + b + a beside a Q6_K qkv (33 groups on 132 SMs) and that qkv (64). Fewer
    blocks where the scratch of the cut parts would not fit. Speed only: no cut changes a sum.
    sms, scratch: the SMs and scratch bytes the launch has (a GEMM pair's share: KernelTable.projections)."""
    sms = GEMM_RESIDENT_BLOCKS if sms is None else sms
    scratch = SCRATCH_BYTES if scratch is None else scratch
    whole = passes * groups
    units = whole * n_sb
    shared = -(-units // sms) + GEMM_CUT_UNITS
    if -(-whole // sms) * n_sb <= shared:
        return whole
    fit = scratch // (4 * gemm_scratch_floats(n_sb, parts))
    return max(1, min(sms, units, fit))


def gx_bytes(m: int, n: int) -> int:
    """Bytes of m rows of width n staged for the GEMM (ptx/split.cuh: a chunk per 64-token pass and super-block)."""
    return -(-m // GEMM_TOKENS) * (n // 256) * GX_CHUNK


def gemm_scratch_floats(n_sb: int, parts: int) -> int:
    """Scratch of one GEMM block (ptx/gemm.cuh gemm_body): the super-block sums of the longest K part and the sums
    of the parts, a slab of 32 floats per thread each."""
    longest = -(-n_sb // parts)
    return (longest + parts) * 32 * MMA_THREADS


# The prefix of a staged x chunk a GEMM reads (ptx/gemm.cuh GemmStage::X_BYTES): the x matrices, plus the min
# product's B for the types whose min term runs on the tensor cores, plus the slice sums for the FMA min term.
GEMM_X_PREFIX = (
    {t: 32 * GX_MAT for t in TILED_TYPES}
    | {"q4_k": 35 * GX_MAT, "q5_k": 35 * GX_MAT}
    | {t: GX_CHUNK for t in ("q4_1", "q5_1", "q2_k")}
)


def gemm_smem_bytes(qtype: str) -> int:
    """Dynamic shared memory of a GEMM block (ptx/gemm.cuh GemmStage): GEMM_STAGES stages of the staged x prefix
    and the 8 warps' weight units (each stage rounded to 128 bytes), their mbarriers (128 bytes), then the
    SwiGLU epilogue's 4 tiles of 64 tokens x 16 rows of floats (GEMM_XCH_AT)."""
    stage = -(-(GEMM_X_PREFIX[qtype] + MMA_WARPS * TILED_UNIT_BYTES[qtype]) // 128) * 128
    return GEMM_STAGES * stage + 128 + 4 * GEMM_TOKENS * 16 * 4


def mma_cluster(blocks: int, grid_blocks: int, nt: int = 1) -> int:
    """Cluster size of a tensor-core launch of `grid_blocks` blocks, B = `blocks` per tile group: the B blocks of
    a group sum their K parts over distributed shared memory (ptx/mma.cuh cluster_sync) when the whole grid is
    resident at once (one wave) and B fits a cluster; else 1, the L2 handshake. Both add the same partials in the
    same order, so this is a speed choice only. Measured on the H200 (ptx/PERF.md): a one-wave grid gains (0.8b
    m = 1 step -11 %), a grid of more waves loses (4b qkv 14.6 -> 18.2 us: a cluster waits for B free slots in
    one GPC), and so did the 0.8b m = 64 step and prefill (3 - 5 %): decode tiles only (nt <= MMA_RING_NT).
    QTUI_MMA_CLUSTER=0 turns it off (A/B runs)."""
    if blocks <= 1 or blocks > MMA_MAX_CLUSTER or grid_blocks > MMA_RESIDENT_BLOCKS or nt > MMA_RING_NT:
        return 1
    return blocks if os.environ.get("QTUI_MMA_CLUSTER", "1") != "0" else 1


def mma_smem_bytes(qtype: str, nt: int) -> int:
    """Dynamic shared memory of a tensor-core GEMV block (ptx/mma.cuh Ring): per warp, at NT <= MMA_RING_NT the
    2 - 4 unit slots of its weight ring (as many as fit MMA_RING_WARP_BYTES), above it the warp's output tile;
    then 32 bytes of slot barriers."""
    unit = TILED_UNIT_BYTES[qtype]
    depth = next(d for d in (4, 3, 2) if d * unit <= MMA_RING_WARP_BYTES or d == 2)
    return MMA_WARPS * ((depth * unit if nt <= MMA_RING_NT else nt * 8 * 16 * 4) + 32)


def qtype_name(qtype: Any) -> str:
    """gguf.GGMLQuantizationType -> our kernel suffix ('q4_k', ...). Raises ValueError for unsupported types."""
    name = getattr(qtype, "name", str(qtype)).lower()
    if name not in GEMV_TYPES:
        raise ValueError(f"no CUDA GEMV kernel for weight type {name}")
    return name


def row_bytes(qtype: str, n_in: int) -> int:
    return n_in // 256 * UNIT_BYTES[qtype]


GEMM_ALONE, GEMM_PAIR_FIRST, GEMM_PAIR_SECOND = 0, 1, 2  # ptx/gemm.cuh: a GEMM's place in a pair


@dataclass(frozen=True, slots=True)
class _Share:
    """A GEMM pair member's part of the GPU (KernelTable.projections): its SMs, its scratch (byte offset, bytes),
    its place (GEMM_PAIR_FIRST / SECOND)."""

    sms: int
    scratch_at: int
    scratch_bytes: int
    pair: int


@dataclass(frozen=True, slots=True)
class _MmaPlan:
    """A tensor-core launch's shape (KernelTable._mma_plan): GEMM or GEMV, token tiles, passes, tile groups, K parts,
    blocks (the GEMV's per tile group; the GEMM's in all, gemm_blocks), the x arguments, rows."""

    gemm: bool
    nt: int
    passes: int
    groups: int
    parts: int
    blocks: int
    x_args: list[KernelArg]
    m: int

    @property
    def blocks_arg(self) -> list[KernelArg]:
        """The GEMV's `blocks` argument (the GEMM takes none: its grid is its blocks)."""
        return [] if self.gemm else [(self.blocks, I32)]


class KernelTable:
    """Loads PTX modules on first use (one per family; one per weight type for the GEMVs, so a model JITs only
    the types it holds), looks functions up by name, and owns the split-K scratch of the GEMVs.
    `dry=True`: no GPU; sites carry fn=None (the ABI test)."""

    def __init__(self, dry: bool = False) -> None:
        self.dry = dry
        self.modules: dict[str, Any] = {}
        self._fns: dict[str, Any] = {}
        self._shmem_opt_in: dict[str, int] = {}  # function -> the dynamic shared memory it is allowed (bytes)
        self._big_cluster: set[str] = set()  # functions allowed clusters of more than 8 blocks
        self.scratch = 0 if dry else int(_zeroed(SCRATCH_BYTES))
        self.counters = 0 if dry else int(_zeroed(4 * MAX_COUNTERS))
        self.gemm_x = 0 if dry else int(_zeroed(GEMM_X_BYTES))
        self.gemm_act = 0 if dry else int(_zeroed(GEMM_X_BYTES))  # the SwiGLU GEMM stages act here (swiglu_out)

    def fn(self, module: str, name: str) -> Any:
        if self.dry:
            return None
        key = f"{module}:{name}"
        if key not in self._fns:
            from cuda.bindings import driver as cu

            if module not in self.modules:
                self.modules[module] = load_module(module)
            self._fns[key] = check(
                cu.cuModuleGetFunction(self.modules[module], name.encode()), f"cuModuleGetFunction({name})"
            )
        return self._fns[key]

    def _site(
        self,
        module: str,
        name: str,
        grid: tuple[int, int, int],
        block: int,
        args: list[KernelArg],
        pdl: bool = True,
        shmem: int = 0,
        cluster: int = 1,
    ) -> Kernel:
        fn = self.fn(module, name)
        # dynamic shared memory: opt in per function to the most any of its sites asks for (static + dynamic above
        # 48 KB needs it, and the kernel's static part is not known here: 48 KB of dynamic plus attn_partial_run's
        # 512 static bytes failed its launch, so every size is declared)
        if shmem > self._shmem_opt_in.get(name, 0) and fn is not None:
            from cuda.bindings import driver as cu

            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(fn, attr, shmem), f"cuFuncSetAttribute({name}, {shmem} B shared)")
            self._shmem_opt_in[name] = shmem
        if cluster > 8 and fn is not None and name not in self._big_cluster:  # above 8 blocks: opt in per function
            from cuda.bindings import driver as cu

            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            check(cu.cuFuncSetAttribute(fn, attr, 1), f"cuFuncSetAttribute({name}, clusters of {cluster})")
            self._big_cluster.add(name)
        return Kernel(fn, name, grid, block, args, shmem=shmem, pdl=pdl, cluster=cluster)

    # --- GEMV (ptx/mma.cuh tensor-core kernels for the integer quants over repacked tiles; ptx/gemv.cuh FMA
    # kernels for the float types). x is split; outputs float32 [m][n] (segment 0 optionally + res).
    def gemv(
        self,
        *,
        qtype: str,
        w: int,
        x: Split,
        outputs: list[tuple[int, int]],
        m: int,
        res: int = 0,
        share: _Share | None = None,
    ) -> list[Kernel]:
        """y_i[m][n_i] = x[m] @ W_i^T for up to 4 matrices (w, n_i) sharing x, stored back to back in one tiled
        buffer (each matrix starts on a tile); y_0 += res when res is given. One launch, or up to three for the GEMM
        (uses_gemm: x staged first). share: a GEMM pair member's SMs, scratch and place (projections)."""
        assert x.n % 256 == 0 and 1 <= len(outputs) <= 4 and m >= 1, (x.n, outputs, m)
        if qtype not in MMA_TYPES:
            return [self._fma_gemv(qtype, w, x, outputs, m, res)]
        n_in, outs = x.n, list(outputs) + [(0, 0)] * (4 - len(outputs))
        tiles = sum(n_tiles(n) for _, n in outputs)
        groups = mma_groups(tiles)
        plan = self._mma_plan(m, groups, mma_blocks_per_group(groups, n_in // 256, MMA_GEMV_TARGET_BLOCKS), x, share)
        args: list[KernelArg] = [(w, P), *plan.x_args, (res, P)]
        for y, n in outs:
            args += [(y, P), (n, I32)]
        scratch = self.scratch + (share.scratch_at if share else 0)
        args += [(n_in, I32), (m, I32), (tiles, I32), *plan.blocks_arg, (plan.parts, I32), (scratch, P)]
        if not plan.gemm:  # (the GEMM's cut groups meet in its fold launch, the GEMV's in arrival counts)
            args.append((self.counters, P))
        return self._mma_sites(plan, qtype, "", args, x, share.pair if share else GEMM_ALONE)

    def projections(self, *, x: Split, launches: list[tuple[str, int, list[tuple[int, int]]]], m: int) -> list[Kernel]:
        """A layer's projections of x, one launch per weight type: (qtype, tiled weights, outputs as gemv's). Two
        that both run as the GEMM on x staged by its producer run side by side (GEMM_PAIRS): the two GEMMs, each
        on a share of the SMs in proportion to its units' cost and on its own half of the scratch, then their
        folds (ptx/gemm.cuh GEMM_PAIR_FIRST / SECOND). The same sums as one after the other."""
        groups = [mma_groups(sum(n_tiles(n) for _, n in outs)) for _, _, outs in launches]
        pair = (
            GEMM_PAIRS
            and len(launches) == 2
            and m <= GEMM_PAIR_MAX_ROWS
            and bool(x.gx)
            and all(q in MMA_TYPES and uses_gemm(m, g, x.n // 256) for (q, _, _), g in zip(launches, groups))
        )
        if not pair:
            return [k for q, w, outs in launches for k in self.gemv(qtype=q, w=w, x=x, outputs=outs, m=m)]
        cost = [g * GEMM_UNIT_COST.get(q, 1.0) for (q, _, _), g in zip(launches, groups)]
        sms = min(GEMM_RESIDENT_BLOCKS - 1, max(1, round(GEMM_RESIDENT_BLOCKS * cost[0] / sum(cost))))
        half = SCRATCH_BYTES // 2
        shares = (
            _Share(sms, 0, half, GEMM_PAIR_FIRST),
            _Share(GEMM_RESIDENT_BLOCKS - sms, half, half, GEMM_PAIR_SECOND),
        )
        (g1, *f1), (g2, *f2) = (
            self.gemv(qtype=q, w=w, x=x, outputs=outs, m=m, share=sh) for (q, w, outs), sh in zip(launches, shares)
        )
        return [g1, g2, *f1, *f2]

    def _mma_plan(self, m: int, groups: int, parts: int, x: Split, share: _Share | None = None) -> _MmaPlan:
        """How a tensor-core launch of m rows over `groups` tile groups and `parts` K parts runs: the 64-token GEMM
        (uses_gemm; x read from the staged buffer), else the GEMV's NT-token passes."""
        gemm = uses_gemm(m, groups, x.n // 256)
        nt = GEMM_TOKENS // 8 if gemm else mma_token_tiles(m)
        passes = -(-m // (8 * nt))
        if gemm:
            at = (share.sms, share.scratch_bytes) if share else (None, None)
            blocks = gemm_blocks(passes, groups, x.n // 256, parts, *at)
            assert parts + x.n // 256 <= GEMM_FOLD_MAX_SLABS, (parts, x.n)  # a cut group's slabs (gemm_fold_body)
        else:
            blocks = mma_launch_blocks(nt, parts, groups, passes)
            self._check_scratch(passes, groups, blocks, nt)
        x_args: list[KernelArg] = [(x.gx or self.gemm_x, P)] if gemm else [(x.xs, P), (x.xsum, P)]
        return _MmaPlan(gemm, nt, passes, groups, parts, blocks, x_args, m)

    def _mma_sites(
        self, plan: _MmaPlan, qtype: str, kind: str, args: list[KernelArg], x: Split, pair: int = GEMM_ALONE
    ) -> list[Kernel]:
        """The launches of a plan of `kind` ("" or "swiglu_"): the GEMM (its 32-token form up to GEMM_NARROW_ROWS
        rows; the one-matrix GEMM with its `pair` place last), gemm_stage_x before it where x's producer did not
        stage x, and its fold launch after it where its units are shared out with tile groups cut (gemm_fold: the
        fold's arguments are the GEMM's after x); or the GEMV."""
        if not plan.gemm:
            grid = (plan.groups * plan.blocks, plan.passes, 1)
            cluster = mma_cluster(plan.blocks, grid[0] * plan.passes, plan.nt)
            shmem = mma_smem_bytes(qtype, plan.nt)
            name = f"mma_{kind or 'gemv_'}{qtype}_n{plan.nt}"
            return [self._site(f"gemv_{qtype}", name, grid, MMA_THREADS, args, shmem=shmem, cluster=cluster)]
        n32 = "_n32" if plan.m <= min(GEMM_NARROW_ROWS, 32) else ""
        gemm = self._site(
            f"gemv_{qtype}",
            f"mma_gemm_{kind}{qtype}{n32}",
            (plan.blocks, 1, 1),
            MMA_THREADS,
            args if kind else [*args, (pair, I32)],
            shmem=gemm_smem_bytes(qtype),
        )
        sites = [gemm] if x.gx else [self.gemm_stage(x=x, m=plan.m), gemm]  # x.gx: staged by its producer
        if plan.blocks != plan.passes * plan.groups:  # tile groups cut: a fold block per (pass, group) and token tile
            fold_args: list[KernelArg] = [(plan.blocks, I32), *args[(2 if kind else 1) + 1 :]]  # after the weights, x
            token_tiles = (1 if n32 else GEMM_FOLD_SWIGLU_SPLIT) if kind else (4 if n32 else GEMM_TOKENS // 8)
            grid = (plan.passes * plan.groups, token_tiles, 1)
            name = f"gemm_fold_{kind}".rstrip("_") + n32
            sites.append(self._site("gemm_stage", name, grid, MMA_THREADS, fold_args))
        return sites

    def staged(self, x: Split, m: int) -> Split:
        """x for a step of m rows, its producer (rmsnorm, the delta rule, attn_combine) writing the GEMM's staged
        form too where a GEMM may read it (m >= GEMM_MIN_ROWS): the GEMM then runs without gemm_stage_x. The staged
        buffer holds one activation at a time, so the GEMMs reading x must come before the next producer's."""
        return self._staged_into(x, m, self.gemm_x)

    def _staged_into(self, x: Split, m: int, buf: int) -> Split:
        """x marked as staged into buf by its producer, where that is on and x is whole super-blocks; else x."""
        if not PRODUCERS_STAGE or m < GEMM_MIN_ROWS or x.n % 256:
            return x
        assert gx_bytes(m, x.n) <= GEMM_X_BYTES, (m, x.n)
        return Split(x.xs, x.xsum, x.n, buf)

    def gemm_stage(self, *, x: Split, m: int) -> Kernel:
        """The GEMM's activations: x [m] split rows -> GEMM_TOKENS-token passes staged in ptx/split.cuh's layout in
        the table's gemm_x buffer. Grid (passes, super-blocks, 5), 256 threads."""
        passes, n_sb = -(-m // GEMM_TOKENS), x.n // 256
        assert gx_bytes(m, x.n) <= GEMM_X_BYTES, (m, x.n)
        args: list[KernelArg] = [(x.xs, P), (x.xsum, P), (self.gemm_x, P), (x.n, I32), (m, I32)]
        return self._site("gemm_stage", "gemm_stage_x", (passes, n_sb, 5), 256, args)

    def _fma_gemv(self, qtype: str, w: int, x: Split, outputs: list[tuple[int, int]], m: int, res: int) -> Kernel:
        M, groups, rb, n_in = fma_bucket(m), -(-m // 16), row_bytes(qtype, x.n), x.n
        if len(outputs) == 1:
            ((y, n),) = outputs
            args: list[KernelArg] = [(w, P), (x.xs, P), (y, P), (res, P), (n_in, I32), (n, I32), (rb, I64)]
            return self._site(f"gemv_{qtype}", f"gemv_{qtype}_m{M}", (-(-n // 4), groups, 1), 128, args)
        assert res == 0, "the multi-matrix FMA kernel has no residual"
        args, ptr = [], w
        for y, n in list(outputs) + [(0, 0)] * (4 - len(outputs)):
            args += [(ptr if n else 0, P), (y, P), (n, I32)]
            ptr += n * rb
        args += [(x.xs, P), (n_in, I32), (rb, I64)]
        n_blocks = sum(-(-n // 4) for _, n in outputs)
        return self._site(f"gemv_{qtype}", f"gemv4_{qtype}_m{M}", (n_blocks, groups, 1), 128, args)

    def _swiglu_plan(self, x: Split, act: Split, m: int) -> _MmaPlan:
        groups = mma_groups(n_tiles(act.n), 2)
        return self._mma_plan(m, groups, mma_blocks_per_group(groups, x.n // 256), x)

    def swiglu_out(self, *, x: Split, act: Split, m: int) -> Split:
        """act as the SwiGLU of x leaves it: staged for the ffn_down GEMM as well (in gemm_act) where the SwiGLU
        runs as the GEMM, whose epilogue then writes both forms (ptx/mma.cuh swiglu_store)."""
        return self._staged_into(act, m, self.gemm_act) if self._swiglu_plan(x, act, m).gemm else act

    def swiglu_gemv(self, *, qtype: str, w_gate: int, w_up: int, x: Split, act: Split, m: int) -> list[Kernel]:
        """act[m] = split(silu(x @ Wg^T) * (x @ Wu^T)) for gate and up of one tiled type (n_ff = act.n), staged too
        where swiglu_out says so. One launch, or up to three for the GEMM (_mma_sites)."""
        assert qtype in MMA_TYPES and act.n % 16 == 0
        plan = self._swiglu_plan(x, act, m)
        args: list[KernelArg] = [
            (w_gate, P),
            (w_up, P),
            *plan.x_args,
            (act.xs, P),
            (act.xsum, P),
            (act.n, I32),
            (x.n, I32),
            (m, I32),
            *plan.blocks_arg,
            (plan.parts, I32),
            (self.scratch, P),
        ]
        if plan.gemm:  # (swiglu_out's act)
            args.append((self._staged_into(act, m, self.gemm_act).gx, P))
        else:
            args.append((self.counters, P))
        return self._mma_sites(plan, qtype, "swiglu_", args, x)

    def _check_scratch(self, passes: int, groups: int, blocks: int, nt: int) -> None:
        if blocks > 1:  # partials: [pass][group][block][warp][NT*128] floats
            assert passes * groups <= DELTA_CLAIMS_AT, (passes, groups)
            need = passes * groups * blocks * MMA_WARPS * nt * 128 * 4
            assert need <= SCRATCH_BYTES, (passes, groups, blocks, nt, need)

    def embed(self, *, qtype: str, m: int, table: int, tokens: int, out: int, n_embd: int) -> Kernel:
        """out[m][n_embd] float32 = dequantized rows tokens[0..m) of the table (tiled for the integer quants).
        Grid (m), 256 threads. The first kernel of a step: a plain launch."""
        if qtype in MMA_TYPES:
            args: list[KernelArg] = [(table, P), (tokens, P), (out, P), (n_embd, I32)]
        else:
            args = [(table, P), (tokens, P), (out, P), (n_embd, I32), (row_bytes(qtype, n_embd), I64)]
        return self._site(f"gemv_{qtype}", f"embed_{qtype}", (m, 1, 1), 256, args, pdl=False)

    def repack(self, *, qtype: str, raw: int, out: int, n_out: int, n_in: int) -> Kernel:
        """GGUF rows -> the tiled layout (ptx/repack.cu): a warp per 16-row x 256-value unit."""
        units = n_tiles(n_out) * (n_in // 256)
        return self._site(
            "repack",
            f"repack_{qtype}",
            (-(-units // 8), 1, 1),
            256,
            [(raw, P), (out, P), (n_out, I32), (n_in, I32)],
            pdl=False,
        )

    # --- norms and the split format (ptx/norms.cu, ptx/elementwise.cu) ---
    def rmsnorm(self, *, m: int, x: int, w: int, out: Split, eps: float) -> Kernel:
        """out[m] = split(x / sqrt(mean(x^2) + eps) * w), x float32 [m][n]. Grid (m, ceil(n / 1024)), 256 threads:
        each block of a row stores 1024 of its values (4b, H100: m = 64 302 -> 216 us a step, m = 1 195 -> 124)."""
        return self._site(
            "norms",
            "rmsnorm",
            (m, -(-out.n // 1024), 1),
            256,
            [(x, P), (w, P), (out.xs, P), (out.xsum, P), (out.n, I32), (eps, F32), (out.gx, P)],
        )

    def split_rows(self, *, m: int, x: int, out: Split) -> Kernel:
        """out[m] = split(x), x float32 [m][n]. Grid (ceil(n/1024), m), 256 threads."""
        return self._site(
            "elementwise",
            "split_rows",
            (-(-out.n // 1024), m, 1),
            256,
            [(x, P), (out.xs, P), (out.xsum, P), (out.n, I32)],
        )

    def swiglu_split(self, *, m: int, gate: int, up: int, out: Split) -> Kernel:
        """out[m] = split(silu(gate) * up), gate/up float32 [m][n] (the float weight types' SwiGLU)."""
        return self._site(
            "elementwise",
            "swiglu_split",
            (-(-out.n // 1024), m, 1),
            256,
            [(gate, P), (up, P), (out.xs, P), (out.xsum, P), (out.n, I32)],
        )

    def read_stream(self, *, buf: int, nbytes: int, out: int, blocks: int) -> Kernel:
        """Read nbytes (a multiple of 16) of buf once: the streaming-read ceiling. Grid `blocks`, 256 threads."""
        return self._site(
            "elementwise", "read_stream", (blocks, 1, 1), 256, [(buf, P), (nbytes // 16, I64), (out, P)], pdl=False
        )

    def argmax(self, *, m: int, logits: int, tokens: int, n: int) -> Kernel:
        """tokens[m] = argmax of each logits row (ties -> lowest index). Grid (ARGMAX_PARTS, m), 256 threads;
        the parts' (value, index) pairs in the GEMV scratch (free by then), one counter per row."""
        assert m <= ARGMAX_ROWS
        counters = self.counters + 4 * (MAX_COUNTERS - ARGMAX_ROWS) if self.counters else 0
        return self._site(
            "elementwise",
            "argmax_rows",
            (ARGMAX_PARTS, m, 1),
            256,
            [(logits, P), (tokens, P), (n, I32), (self.scratch, P), (counters, P)],
        )

    # --- attention (ptx/attention.cu) ---
    def qk_norm_rope_store(
        self,
        *,
        m: int,
        qg: int,
        kb: int,
        vb: int,
        q_norm: int,
        k_norm: int,
        q_out: int,
        k_cache: int,
        v_cache: int,
        slot_stride: int,
        slots: int,
        pos: int,
        n_head: int,
        n_kv: int,
        hd: int,
        max_ctx: int,
        n_rot: int,
        theta: float,
        eps: float,
    ) -> Kernel:
        """Grid (n_head + n_kv, m), hd threads."""
        assert hd <= 512 and hd % 32 == 0
        return self._site(
            "attention",
            "qk_norm_rope_store",
            (n_head + n_kv, m, 1),
            hd,
            [
                (qg, P),
                (kb, P),
                (vb, P),
                (q_norm, P),
                (k_norm, P),
                (q_out, P),
                (k_cache, P),
                (v_cache, P),
                (slot_stride, I64),
                (slots, P),
                (pos, P),
                (n_head, I32),
                (n_kv, I32),
                (max_ctx, I32),
                (n_rot, I32),
                (theta, F32),
                (eps, F32),
            ],
        )

    def attn_partial(
        self,
        *,
        m: int,
        q: int,
        k_cache: int,
        v_cache: int,
        slot_stride: int,
        slots: int,
        pos: int,
        part: int,
        n_head: int,
        n_kv: int,
        hd: int,
        n_pieces: int,
        piece_blocks: int | None = None,
        run: int = 1,
    ) -> Kernel:
        """part [m][n_head][n_pieces][hd+2]. Decode (run 1): attn_partial, grid (piece blocks, n_head, m), 256
        threads (attn_piece_blocks unless given: no choice changes a bit). Runs of rows of one slot at consecutive
        positions (run > 1: a prefill chunk, or several slots' pieces side by side): attn_partial_run, the same bits
        with each K / V piece read once per block of queries (attn_run_grid), where no block's rows cross from one
        run into the next (one run, or runs a whole number of blocks long); else attn_partial."""
        args: list[KernelArg] = [
            (q, P),
            (k_cache, P),
            (v_cache, P),
            (slot_stride, I64),
            (slots, P),
            (pos, P),
            (part, P),
            (n_head, I32),
            (n_kv, I32),
            (hd, I32),
            (n_pieces, I32),
        ]
        if run > 1 and ATTN_RUN:
            grid, rows = attn_run_grid(n_pieces, n_head, n_kv, m)
            if run == m or run % rows == 0:
                if piece_blocks is not None:
                    grid = (piece_blocks, grid[1], grid[2])
                args += [(m, I32), (rows, I32)]
                shmem = attn_run_smem_bytes(hd)
                return self._site("attention", "attn_partial_run", grid, ATTN_RUN_THREADS, args, shmem=shmem)
        z = attn_piece_blocks(n_pieces, n_head, m) if piece_blocks is None else piece_blocks
        return self._site("attention", "attn_partial", (z, n_head, m), 256, args)

    def attn_combine(
        self, *, m: int, part: int, qg: int, pos: int, out: Split, n_head: int, hd: int, n_pieces: int
    ) -> Kernel:
        """Grid (n_head, m), hd threads; out = split([m][n_head * hd]) gated by sigmoid(gate)."""
        assert out.n == n_head * hd
        return self._site(
            "attention",
            "attn_combine",
            (n_head, m, 1),
            hd,
            [(part, P), (qg, P), (pos, P), (out.xs, P), (out.xsum, P), (n_head, I32), (n_pieces, I32), (out.gx, P)],
        )

    # --- Gated DeltaNet (ptx/deltanet.cu) ---
    # Rows come in runs of `run` consecutive rows of one slot (slots[first row of the run]), processed in order
    # by one block: decode has run = 1 (each row its own slot), a prefill chunk of m tokens has run = m.
    def conv_step_silu(
        self,
        *,
        m: int,
        x: int,
        w: int,
        state: int,
        slot_stride: int,
        slots: int,
        out: int,
        channels: int,
        kernel: int,
        run: int = 1,
    ) -> Kernel:
        """Grid (ceil(C/256), m / run, segments of CONV_SEG_ROWS rows of each run), 256 threads; a decode step
        (run 1): conv_step_silu_rows, grid (ceil(C/256), ceil(m / CONV_DECODE_ROWS)). The same bits."""
        assert kernel <= MAX_CONV and run >= 1 and m % run == 0, (kernel, m, run)
        io: list[KernelArg] = [(x, P), (w, P), (state, P), (slot_stride, I64), (slots, P), (out, P)]
        if run == 1 and CONV_DECODE_KERNEL:
            grid = (-(-channels // 256), -(-m // CONV_DECODE_ROWS), 1)
            return self._site(
                "deltanet", "conv_step_silu_rows", grid, 256, [*io, (channels, I32), (kernel, I32), (m, I32)]
            )
        return self._site(
            "deltanet",
            "conv_step_silu",
            (-(-channels // 256), m // run, -(-run // CONV_SEG_ROWS)),
            256,
            [*io, (channels, I32), (kernel, I32), (run, I32), (CONV_SEG_ROWS, I32)],
        )

    def delta_rule(
        self,
        *,
        m: int,
        d_k: int,
        conv_out: int,
        a: int,
        b: int,
        ssm_a: int,
        dt_bias: int,
        S: int,
        slot_stride: int,
        slots: int,
        z: int,
        norm_w: int,
        out: Split,
        H_k: int,
        H_v: int,
        eps: float,
        run: int = 1,
        qk_n: int = 0,
        gates: int = 0,
        o_raw: int = 0,
        step_blocks: int | None = None,
        conv: ConvIn | None = None,
        layer: int = 0,
    ) -> list[Kernel]:
        """The delta rule + gated RMSNorm * silu(z) of m rows in runs of `run` (ptx/deltanet.cu), out = split
        ([m][H_v * d_v]), d_k == d_v in {64, 128}: one fused delta_step for decode (run 1), the prefill pipeline
        delta_prep -> delta_scan -> delta_norm for longer runs, with its scratch qk_n [m][2*H_k*d_k], gates
        [m][2*H_v], o_raw [m][H_v*d_k] float32. Both compute every row the same way, bit for bit (test_layers.py);
        the pipeline spreads a head's columns over d_k / 8 warps. step_blocks: delta_step's persistent blocks
        (default DELTA_STEP_BLOCKS; any count gives the same bits). With `conv`, the conv step before it too
        (into conv_out): a decode step's conv inside the delta rule (delta_conv_step, m * H_k (row, k-head)
        items) where DELTA_CONV allows and its kernel has DELTA_CONV_K taps, else conv_step_silu first. layer: the
        GDN layer's index (its claim counters: two launches of one graph never share them)."""
        assert run >= 1 and m % run == 0 and out.n == H_v * d_k, (m, run, out.n, H_v, d_k)
        mod, gate_in = "deltanet", [(conv_out, P), (a, P), (b, P), (ssm_a, P), (dt_bias, P)]
        # the persistent decode kernels' arguments after their inputs, and their launch (items: see each kernel)
        state_out: list[KernelArg] = [(S, P), (slot_stride, I64), (slots, P), (z, P), (norm_w, P), (out.xs, P)]
        state_out += [(out.xsum, P), (H_k, I32), (H_v, I32), (eps, F32)]

        assert 0 <= layer < DELTA_CLAIM_LAYERS, layer
        claims = self.counters + 4 * (DELTA_CLAIMS_AT + 2 * layer) if self.counters and DELTA_CLAIMS else 0

        def persistent(name: str, items: int, args: list[KernelArg]) -> Kernel:
            grid = (min(items, step_blocks or DELTA_STEP_BLOCKS[d_k]), 1, 1)
            args = [*args, (claims, P)]
            return self._site(mod, f"{name}_d{d_k}", grid, 4 * d_k, args, shmem=delta_step_smem_bytes(d_k))

        fused_ok = run == 1 and m < DELTA_PIPELINE_MIN_ROWS
        before: list[Kernel] = []  # the conv step, where it runs apart
        if conv is not None:
            assert H_v % H_k == 0, (H_v, H_k)
            if fused_ok and DELTA_CONV and m >= DELTA_CONV_MIN_ROWS and conv.kernel == DELTA_CONV_K:
                conv_in: list[KernelArg] = [(conv.x, P), (conv.w, P), (conv.state, P), (conv.slot_stride, I64)]
                items = H_k * m  # (row, k-head) pairs
                args: list[KernelArg] = [*conv_in, *gate_in[1:], *state_out, (items, I32), (out.gx, P)]
                return [persistent("delta_conv_step", items, args)]
            before = [self.conv_step_silu(
                m=m, x=conv.x, w=conv.w, state=conv.state, slot_stride=conv.slot_stride, slots=slots, out=conv_out,
                channels=(2 * H_k + H_v) * d_k, kernel=conv.kernel, run=run,
            )]  # fmt: skip
        if fused_ok:  # the fused kernel: H_v * m items, 4*d_k threads
            items = H_v * m
            fused: list[KernelArg] = [*gate_in, *state_out, (1, I32), (items, I32), (out.gx, P)]
            return [*before, persistent("delta_step", items, fused)]
        assert d_k % 32 == 0 and qk_n and gates and o_raw, (d_k, qk_n, gates, o_raw)
        prep: list[KernelArg] = [*gate_in, (qk_n, P), (gates, P), (H_k, I32), (H_v, I32)]
        scan: list[KernelArg] = [(qk_n, P), (gates, P), (conv_out, P), (S, P), (slot_stride, I64), (slots, P)]
        scan += [(o_raw, P), (H_k, I32), (H_v, I32), (run, I32)]
        norm: list[KernelArg] = [(o_raw, P), (z, P), (norm_w, P), (out.xs, P), (out.xsum, P), (H_v, I32), (eps, F32)]
        norm += [(out.gx, P)]
        return [
            *before,
            self._site(mod, f"delta_prep_d{d_k}", (H_k, m, 1), 2 * d_k, prep),
            self._site(mod, f"delta_scan_d{d_k}", (H_v * d_k // 8, m // run, 1), 32, scan),
            self._site(mod, f"delta_norm_d{d_k}", (H_v, m, 1), d_k, norm),
        ]


def _zeroed(nbytes: int) -> DeviceBuffer:
    """A device allocation set to zero synchronously (the split-K counters must start at 0)."""
    from cuda.bindings import driver as cu

    buf = DeviceBuffer(nbytes)
    check(cu.cuMemsetD32(int(buf), 0, nbytes // 4), "cuMemsetD32")
    return buf
