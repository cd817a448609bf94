"""The kernel table: one builder per PTX entry, each stating its grid and tensor shapes.

Every builder returns a `Kernel` launch site whose arguments are fixed device pointers (per-step values such
as token ids, slot ids and positions are read by the kernels from fixed device buffers), so a list of launch
sites is one decode step: launched eagerly, or captured once into a CUDA graph and replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qtui.engine.cuda.driver import Kernel, check, load_module

P, I32, I64, F32 = np.uint64, np.int32, np.int64, np.float32
ATTN_PIECE = 256  # positions per attention piece: must match ATTN_PIECE in ptx/attention.cu
GEMV_BUCKETS = (1, 2, 4, 8, 16)  # the M instantiations in ptx/gemv.cuh
MAX_GEMV_ROWS = GEMV_BUCKETS[-1]
GEMV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k", "q5_k", "q6_k")
# Integer-quant types run the tensor-core kernels of ptx/mma.cuh (16-row tiles, 8-token tiles, 8 warps
# splitting K); the float types run the FMA kernels of ptx/gemv.cuh (one warp per row).
MMA_TYPES = ("q8_0", "q4_k", "q5_k", "q6_k")
MMA_THREADS = 256  # MMA_WARPS * 32 in ptx/mma.cuh
# Bytes per 256 values in each type's raw GGUF rows (a "unit" of ptx/gemv.cu).
UNIT_BYTES = {"f32": 1024, "f16": 512, "bf16": 512, "q8_0": 272, "q4_k": 144, "q5_k": 176, "q6_k": 210}


def gemv_bucket(m: int) -> int:
    """The GEMV instantiation M used for m rows: the smallest M >= m (rows m..M-1 are scratch padding)."""
    assert 1 <= m <= MAX_GEMV_ROWS, m
    return next(b for b in GEMV_BUCKETS if b >= m)


def mma_tiles(m: int) -> int:
    """8-token tiles of the tensor-core kernels for m rows (NT in ptx/mma.cuh): 1 for m <= 8, 2 for m <= 16."""
    assert 1 <= m <= MAX_GEMV_ROWS, m
    return 1 if m <= 8 else 2


def qtype_name(qtype: Any) -> str:
    """gguf.GGMLQuantizationType -> our kernel suffix ('q4_k', ...). Raises ValueError for unsupported types."""
    name = getattr(qtype, "name", str(qtype)).lower()
    if name not in GEMV_TYPES:
        raise ValueError(f"no CUDA GEMV kernel for weight type {name}")
    return name


def _row_bytes(qtype: str, n_in: int) -> int:
    return n_in // 256 * UNIT_BYTES[qtype]


class KernelTable:
    """Loads PTX modules on first use (one per family; one per weight type for the GEMVs, so a model JITs
    only the types it holds) and looks functions up by name (cached)."""

    def __init__(self) -> None:
        self.modules: dict[str, Any] = {}
        self._fns: dict[str, Any] = {}

    def fn(self, module: str, name: str) -> Any:
        key = f"{module}:{name}"
        if key not in self._fns:
            from cuda.bindings import driver as cu

            if module not in self.modules:
                self.modules[module] = load_module(module)
            self._fns[key] = check(cu.cuModuleGetFunction(self.modules[module], name.encode()),
                                   f"cuModuleGetFunction({name})")
        return self._fns[key]

    # --- GEMV / embedding (ptx/gemv.cuh FMA kernels and ptx/mma.cuh tensor-core kernels, one module
    # ptx/gemv_<type>.cu per weight type). Float types: m rows run the M = gemv_bucket(m) instantiation, so x,
    # y (and res) need M rows of valid memory. Integer-quant types read and write rows < m only.
    def gemv(self, qtype: str, m: int, w: int, x: int, y: int, res: int, n_in: int, n_out: int) -> Kernel:
        """y[m][n_out] = (res or 0) + x[m][n_in] @ W^T; W raw [n_out][row_bytes]."""
        assert n_in % 256 == 0, n_in
        args = [(w, P), (x, P), (y, P), (res, P), (n_in, I32), (n_out, I32), (_row_bytes(qtype, n_in), I64)]
        if qtype in MMA_TYPES:
            name = f"mma_gemv_{qtype}_n{mma_tiles(m)}"
            return Kernel(self.fn(f"gemv_{qtype}", name), name, ((n_out + 15) // 16, 1, 1), MMA_THREADS,
                          args + [(m, I32)])
        name = f"gemv_{qtype}_m{gemv_bucket(m)}"
        return Kernel(self.fn(f"gemv_{qtype}", name), name, ((n_out + 3) // 4, 1, 1), 128, args)

    def gemv4(self, qtype: str, m: int, segments: list[tuple[int, int, int]], x: int, n_in: int) -> Kernel:
        """Up to 4 matrices (w, y, n_out) of one type sharing x[m][n_in], in one launch: y_i = x @ W_i^T."""
        assert 1 <= len(segments) <= 4 and n_in % 256 == 0
        segs = list(segments) + [(0, 0, 0)] * (4 - len(segments))
        args: list[tuple[Any, Any]] = []
        for w, y, n in segs:
            args += [(w, P), (y, P), (n, I32)]
        args += [(x, P), (n_in, I32), (_row_bytes(qtype, n_in), I64)]
        if qtype in MMA_TYPES:
            name = f"mma_gemv4_{qtype}_n{mma_tiles(m)}"
            n_blocks = sum((n + 15) // 16 for _, _, n in segs)
            return Kernel(self.fn(f"gemv_{qtype}", name), name, (n_blocks, 1, 1), MMA_THREADS, args + [(m, I32)])
        name = f"gemv4_{qtype}_m{gemv_bucket(m)}"
        n_blocks = sum((n + 3) // 4 for _, _, n in segs)
        return Kernel(self.fn(f"gemv_{qtype}", name), name, (n_blocks, 1, 1), 128, args)

    def gemv_swiglu(self, qtype: str, m: int, w_gate: int, w_up: int, x: int, act: int, n_in: int,
                    n_out: int) -> Kernel:
        """act[m][n_out] = silu(x @ Wg^T) * (x @ Wu^T), gate and up of one type."""
        args = [(w_gate, P), (w_up, P), (x, P), (act, P), (n_in, I32), (n_out, I32), (_row_bytes(qtype, n_in), I64)]
        if qtype in MMA_TYPES:
            name = f"mma_swiglu_{qtype}_n{mma_tiles(m)}"
            return Kernel(self.fn(f"gemv_{qtype}", name), name, ((n_out + 15) // 16, 1, 1), MMA_THREADS,
                          args + [(m, I32)])
        name = f"gemv_swiglu_{qtype}_m{gemv_bucket(m)}"
        return Kernel(self.fn(f"gemv_{qtype}", name), name, ((n_out + 3) // 4, 1, 1), 128, args)

    def embed(self, qtype: str, m: int, table: int, tokens: int, out: int, n_embd: int) -> Kernel:
        """out[m][n_embd] = dequantized rows tokens[0..m) of the table. Grid (m), 256 threads."""
        name = f"embed_{qtype}"
        return Kernel(self.fn(f"gemv_{qtype}", name), name, (m, 1, 1), 256,
                      [(table, P), (tokens, P), (out, P), (n_embd, I32), (_row_bytes(qtype, n_embd), I64)])

    # --- norms (ptx/norms.cu) ---
    def rmsnorm(self, m: int, x: int, w: int, out: int, n: int, eps: float) -> Kernel:
        """out[m][n] = x / sqrt(mean(x^2) + eps) * w. Grid (m), 256 threads."""
        return Kernel(self.fn("norms", "rmsnorm"), "rmsnorm", (m, 1, 1), 256,
                      [(x, P), (w, P), (out, P), (n, I32), (eps, F32)])

    def gated_rmsnorm_silu(self, m: int, o: int, z: int, w: int, out: int, n_heads: int, d_v: int,
                           eps: float) -> Kernel:
        """out[m][H][d_v] = rmsnorm(o per head) * w * silu(z). Grid (H, m), d_v threads."""
        return Kernel(self.fn("norms", "gated_rmsnorm_silu"), "gated_rmsnorm_silu", (n_heads, m, 1), d_v,
                      [(o, P), (z, P), (w, P), (out, P), (n_heads, I32), (eps, F32)])

    # --- attention (ptx/attention.cu) ---
    def qk_norm_rope_store(self, m: int, qg: int, kb: int, vb: int, q_norm: int, k_norm: int, q_out: int,
                           k_cache: int, v_cache: int, slot_stride: int, slots: int, pos: int, n_head: int,
                           n_kv: int, hd: int, max_ctx: int, n_rot: int, theta: float, eps: float) -> Kernel:
        """Grid (n_head + n_kv, m), hd threads (hd <= 512)."""
        return Kernel(self.fn("attention", "qk_norm_rope_store"), "qk_norm_rope_store", (n_head + n_kv, m, 1), hd,
                      [(qg, P), (kb, P), (vb, P), (q_norm, P), (k_norm, P), (q_out, P), (k_cache, P),
                       (v_cache, P), (slot_stride, I64), (slots, P), (pos, P), (n_head, I32), (n_kv, I32),
                       (max_ctx, I32), (n_rot, I32), (theta, F32), (eps, F32)])

    def attn_partial(self, m: int, q: int, k_cache: int, v_cache: int, slot_stride: int, slots: int, pos: int,
                     part: int, n_head: int, n_kv: int, hd: int, n_pieces: int) -> Kernel:
        """Grid (n_pieces, n_head, m), 256 threads; part [m][n_head][n_pieces][hd+2]."""
        return Kernel(self.fn("attention", "attn_partial"), "attn_partial", (n_pieces, n_head, m), 256,
                      [(q, P), (k_cache, P), (v_cache, P), (slot_stride, I64), (slots, P), (pos, P), (part, P),
                       (n_head, I32), (n_kv, I32), (hd, I32), (n_pieces, I32)])

    def attn_combine(self, m: int, part: int, qg: int, pos: int, out: int, n_head: int, hd: int,
                     n_pieces: int) -> Kernel:
        """Grid (n_head, m), hd threads; out [m][n_head][hd] gated by sigmoid(gate)."""
        return Kernel(self.fn("attention", "attn_combine"), "attn_combine", (n_head, m, 1), hd,
                      [(part, P), (qg, P), (pos, P), (out, P), (n_head, I32), (n_pieces, I32)])

    # --- Gated DeltaNet (ptx/deltanet.cu) ---
    # Rows come in runs of `run` consecutive rows of one slot (slots[first row of the run]), processed in order
    # by one block: decode has run = 1 (each row its own slot), a prefill chunk of m tokens has run = m.
    def conv_step_silu(self, m: int, x: int, w: int, state: int, slot_stride: int, slots: int, out: int, C: int,
                       K: int, run: int = 1) -> Kernel:
        """Grid (ceil(C/256), m / run), 256 threads."""
        assert K <= 8 and run >= 1 and m % run == 0, (K, m, run)
        return Kernel(self.fn("deltanet", "conv_step_silu"), "conv_step_silu", ((C + 255) // 256, m // run, 1),
                      256, [(x, P), (w, P), (state, P), (slot_stride, I64), (slots, P), (out, P), (C, I32), (K, I32),
                            (run, I32)])

    def delta_step(self, m: int, d_k: int, conv_out: int, a: int, b: int, ssm_a: int, dt_bias: int, S: int,
                   slot_stride: int, slots: int, z: int, norm_w: int, out: int, H_k: int, H_v: int,
                   eps: float, run: int = 1) -> Kernel:
        """Delta rule + gated RMSNorm * silu(z): out [m][H_v][d_v]. Grid (H_v, m / run), 4*d_k threads
        (d_k == d_v in {64, 128})."""
        assert run >= 1 and m % run == 0, (m, run)
        name = f"delta_step_d{d_k}"
        return Kernel(self.fn("deltanet", name), name, (H_v, m // run, 1), 4 * d_k,
                      [(conv_out, P), (a, P), (b, P), (ssm_a, P), (dt_bias, P), (S, P), (slot_stride, I64),
                       (slots, P), (z, P), (norm_w, P), (out, P), (H_k, I32), (H_v, I32), (eps, F32), (run, I32)])

    # --- elementwise (ptx/elementwise.cu) ---
    def swiglu(self, total: int, gate: int, up: int, out: int) -> Kernel:
        return Kernel(self.fn("elementwise", "swiglu"), "swiglu", ((total + 255) // 256, 1, 1), 256,
                      [(gate, P), (up, P), (out, P), (total, I32)])

    def argmax(self, m: int, logits: int, tokens: int, n: int) -> Kernel:
        """tokens[m] = argmax of each logits row (ties -> lowest index). Grid (m), 1024 threads."""
        return Kernel(self.fn("elementwise", "argmax_rows"), "argmax_rows", (m, 1, 1), 1024,
                      [(logits, P), (tokens, P), (n, I32)])
