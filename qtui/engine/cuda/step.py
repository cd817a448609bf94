"""One step for m rows as a fixed list of launch sites (reference/qwen35.md §6, the forward pass).

A step is either a decode step (m rows, each a different slot) or a prefill chunk (m rows of one slot at
consecutive positions); only the recurrent kernels care which (`run`: rows per slot run), since GEMVs, norms
and attention treat every row independently by its own slot and position.

Every pointer in the list is fixed: activations are preallocated for the largest step, state lives in pools
indexed by slot id, and the per-step values (token ids, slot ids, positions) are read by the kernels from the
fixed step buffer. So the same list is launched eagerly or captured once into a graph and replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

from qtui.engine.cuda.driver import DeviceBuffer, Kernel
from qtui.engine.cuda.kernels import ATTN_PIECE, KernelTable, gemv_bucket
from qtui.engine.cuda.weights import DeviceWeights
from qtui.model.config import Qwen35Config

F32_BYTES = 4


@dataclass(slots=True)
class Pools:
    """Per-slot state (float32), each [max_slots][layers of that kind][...]; slot_stride in elements."""

    conv: DeviceBuffer  # [slots][n_gdn][d_conv-1][conv_dim]
    S: DeviceBuffer  # [slots][n_gdn][H_v][d_k][d_v]
    k: DeviceBuffer  # [slots][n_attn][max_ctx][n_kv][hd]
    v: DeviceBuffer  # [slots][n_attn][max_ctx][n_kv][hd]
    conv_layer: int  # elements per layer inside a slot
    s_layer: int
    kv_layer: int
    n_gdn: int
    n_attn: int

    @property
    def conv_stride(self) -> int:
        return self.conv_layer * self.n_gdn

    @property
    def s_stride(self) -> int:
        return self.s_layer * self.n_gdn

    @property
    def kv_stride(self) -> int:
        return self.kv_layer * self.n_attn


class Activations:
    """Scratch for gemv_bucket(max_batch) rows (GEMVs pad m up to their bucket), float32, row-major
    [rows][width], zeroed once; the step buffer holds int32 tokens[B] | slots[B] | pos[B]; out_tokens int32 [B].
    max_batch is the most rows of any step: decode batch or prefill chunk, whichever is larger."""

    def __init__(self, cfg: Qwen35Config, max_batch: int, n_pieces: int, stream) -> None:
        B, hd = max_batch, cfg.head_dim
        rows = gemv_bucket(max_batch)
        widths = {
            "h": cfg.n_embd, "x": cfg.n_embd,
            "qkv": cfg.conv_dim, "conv_out": cfg.conv_dim, "z": cfg.value_dim,
            "o2": cfg.value_dim, "a": cfg.ssm_dt_rank, "b": cfg.ssm_dt_rank,
            "qg": 2 * cfg.n_head * hd, "kb": cfg.n_head_kv * hd, "vb": cfg.n_head_kv * hd,
            "qr": cfg.n_head * hd, "att": cfg.n_head * hd, "part": cfg.n_head * n_pieces * (hd + 2),
            "g": cfg.n_ff, "u": cfg.n_ff, "act": cfg.n_ff, "logits": cfg.n_vocab,
        }  # fmt: skip
        self.widths = widths
        self.bufs = {k: DeviceBuffer(rows * w * F32_BYTES) for k, w in widths.items()}
        for buf in self.bufs.values():
            buf.zero(stream)
        self.step = DeviceBuffer(3 * B * 4)  # int32 [3][B]
        self.out_tokens = DeviceBuffer(B * 4)  # int32 [B]
        self.max_batch = B

    def __getitem__(self, name: str) -> int:
        return int(self.bufs[name])

    def tokens(self) -> int:
        return int(self.step)

    def slots(self) -> int:
        return int(self.step) + 4 * self.max_batch

    def pos(self) -> int:
        return int(self.step) + 8 * self.max_batch

    def free(self) -> None:
        for b in [*self.bufs.values(), self.step, self.out_tokens]:
            b.free()


def build_step(kt: KernelTable, cfg: Qwen35Config, W: DeviceWeights, A: Activations, pools: Pools, m: int,
               head: bool, max_ctx: int, run: int) -> list[Kernel]:
    """Launch sites of one step for rows 0..m-1. head=False stops after the last layer (prefill tokens
    whose logits nobody reads); head=True adds final norm, LM head and argmax into out_tokens (every row).
    run: rows per slot run for the recurrent state, 1 for decode (m slots), m for a prefill chunk (one slot)."""
    D, eps = cfg.n_embd, cfg.rms_eps
    emb = W.matrices["token_embd.weight"]
    ks = [kt.embed(emb.qtype, m, emb.ptr, A.tokens(), A["h"], D)]
    gdn_i = attn_i = 0
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        ks.append(kt.rmsnorm(m, A["h"], W.vectors[p + "attn_norm.weight"], A["x"], D, eps))
        if cfg.recurrent[i]:
            ks += _gdn(kt, cfg, W, A, pools, m, p, gdn_i, run)
            gdn_i += 1
        else:
            ks += _attention(kt, cfg, W, A, pools, m, p, attn_i, max_ctx)
            attn_i += 1
        ks.append(kt.rmsnorm(m, A["h"], W.vectors[p + "post_attention_norm.weight"], A["x"], D, eps))
        ks += _ffn(kt, cfg, W, A, m, p)
    if head:
        out = W.matrices["token_embd.weight" if cfg.tied_embeddings else "output.weight"]
        ks.append(kt.rmsnorm(m, A["h"], W.vectors["output_norm.weight"], A["x"], D, eps))
        ks.append(_gemv(kt, out, m, A["x"], A["logits"]))
        ks.append(kt.argmax(m, A["logits"], int(A.out_tokens), cfg.n_vocab))
    return ks


def _gemv(kt: KernelTable, w, m: int, x: int, y: int, res: int = 0) -> Kernel:
    return kt.gemv(w.qtype, m, w.ptr, x, y, res, w.n_in, w.n_out)


def _projections(kt: KernelTable, m: int, x: int, pairs: list) -> list[Kernel]:
    """Matrices sharing the input x, one gemv4 launch per weight type (a file may mix Q4_K and Q6_K)."""
    by_type: dict[str, list] = {}
    for w, y in pairs:
        by_type.setdefault(w.qtype, []).append((w.ptr, y, w.n_out))
    return [kt.gemv4(qtype, m, segs, x, pairs[0][0].n_in) for qtype, segs in by_type.items()]


def _gdn(kt: KernelTable, cfg: Qwen35Config, W: DeviceWeights, A: Activations, pools: Pools, m: int, p: str,
         li: int, run: int) -> list[Kernel]:
    """Gated DeltaNet layer li (§2.3): projections, conv step, delta rule, gated norm, out projection + residual."""
    M, V = W.matrices, W.vectors
    conv_base = int(pools.conv) + F32_BYTES * li * pools.conv_layer
    s_base = int(pools.S) + F32_BYTES * li * pools.s_layer
    proj = [(M[p + "attn_qkv.weight"], A["qkv"]), (M[p + "attn_gate.weight"], A["z"]),
            (M[p + "ssm_beta.weight"], A["b"]), (M[p + "ssm_alpha.weight"], A["a"])]
    return _projections(kt, m, A["x"], proj) + [
        kt.conv_step_silu(m, A["qkv"], V[p + "ssm_conv1d.weight"], conv_base, pools.conv_stride, A.slots(),
                          A["conv_out"], cfg.conv_dim, cfg.ssm_d_conv, run),
        kt.delta_step(m, cfg.d_k, A["conv_out"], A["a"], A["b"], V[p + "ssm_a"], V[p + "ssm_dt.bias"], s_base,
                      pools.s_stride, A.slots(), A["z"], V[p + "ssm_norm.weight"], A["o2"], cfg.ssm_n_group,
                      cfg.ssm_dt_rank, cfg.rms_eps, run),
        _gemv(kt, M[p + "ssm_out.weight"], m, A["o2"], A["h"], res=A["h"]),
    ]


def _attention(kt: KernelTable, cfg: Qwen35Config, W: DeviceWeights, A: Activations, pools: Pools, m: int,
               p: str, li: int, max_ctx: int) -> list[Kernel]:
    """Gated full-attention layer li (§2.4): q/k/v, norm + RoPE + KV store, split attention, gate, out + residual."""
    M, V = W.matrices, W.vectors
    nh, nkv, hd = cfg.n_head, cfg.n_head_kv, cfg.head_dim
    k_base = int(pools.k) + F32_BYTES * li * pools.kv_layer
    v_base = int(pools.v) + F32_BYTES * li * pools.kv_layer
    n_pieces = (max_ctx + ATTN_PIECE - 1) // ATTN_PIECE
    proj = [(M[p + "attn_q.weight"], A["qg"]), (M[p + "attn_k.weight"], A["kb"]), (M[p + "attn_v.weight"], A["vb"])]
    return _projections(kt, m, A["x"], proj) + [
        kt.qk_norm_rope_store(m, A["qg"], A["kb"], A["vb"], V[p + "attn_q_norm.weight"], V[p + "attn_k_norm.weight"],
                              A["qr"], k_base, v_base, pools.kv_stride, A.slots(), A.pos(), nh, nkv, hd, max_ctx,
                              cfg.n_rot, cfg.rope_theta, cfg.rms_eps),
        kt.attn_partial(m, A["qr"], k_base, v_base, pools.kv_stride, A.slots(), A.pos(), A["part"], nh, nkv, hd,
                        n_pieces),
        kt.attn_combine(m, A["part"], A["qg"], A.pos(), A["att"], nh, hd, n_pieces),
        _gemv(kt, M[p + "attn_output.weight"], m, A["att"], A["h"], res=A["h"]),
    ]


def _ffn(kt: KernelTable, cfg: Qwen35Config, W: DeviceWeights, A: Activations, m: int, p: str) -> list[Kernel]:
    """SwiGLU MLP: gate and up in one launch when they share a type, residual add fused into the down GEMV."""
    M = W.matrices
    gate, up = M[p + "ffn_gate.weight"], M[p + "ffn_up.weight"]
    if gate.qtype == up.qtype:
        first = [kt.gemv_swiglu(gate.qtype, m, gate.ptr, up.ptr, A["x"], A["act"], gate.n_in, gate.n_out)]
    else:
        first = [_gemv(kt, gate, m, A["x"], A["g"]), _gemv(kt, up, m, A["x"], A["u"]),
                 kt.swiglu(m * cfg.n_ff, A["g"], A["u"], A["act"])]
    return first + [_gemv(kt, M[p + "ffn_down.weight"], m, A["act"], A["h"], res=A["h"])]
