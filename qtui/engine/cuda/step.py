"""One step for m rows as a fixed list of launch sites (reference/qwen35.md §6, the forward pass).

A step is either a decode step (m rows, each a different slot) or a prefill chunk (m rows of one slot at
consecutive positions); only the recurrent kernels care which (`run`: rows per slot run), since GEMVs, norms
and attention treat every row independently by its own slot and position.

Every pointer in the list is fixed: activations are preallocated for the largest step, state lives in pools
indexed by slot id, and the per-step values (token ids, slot ids, positions) are read by the kernels from the
fixed step buffer. So the same list is launched eagerly or captured once into a graph and replayed.
GEMV inputs are in the split format (ptx/split.cuh): the kernels that produce them (rmsnorm, the delta rule,
attention, SwiGLU) write it directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from qtui.engine.cuda.driver import DeviceBuffer, Kernel, RowGather, Site
from qtui.engine.cuda.kernels import ATTN_PIECE, MMA_TYPES, ConvIn, KernelTable, Split
from qtui.engine.cuda.weights import DeviceWeights
from qtui.model.config import Qwen35Config

F32_BYTES = 4
# Which rows get the final norm, the LM head and the argmax: none (prefill chunks before the last), all m rows
# (decode), or the last row of each slot run (a prefill step: one run's last chunk, or several slots' pieces side
# by side, CudaEngine.prefill_batch; run r's logits land in row r).
Head = Literal["none", "all", "last"]
# Projection outputs by tensor suffix (weights.SHARED_INPUT) -> activation buffer.
PROJECTION_OUT = {"attn_qkv": "qkv", "attn_gate": "z", "ssm_beta": "b", "ssm_alpha": "a",
                  "attn_q": "qg", "attn_k": "kb", "attn_v": "vb"}  # fmt: skip


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
    """Scratch for `rows` rows (a multiple of 16: the float types' FMA kernels run 16-row groups), zeroed once.
    Float32 row-major [rows][width] buffers, split-format buffers (xs + xsum) for the GEMV inputs, logits for
    `head_rows` rows; the step buffer holds int32 tokens[rows] | slots[rows] | pos[rows]; out_tokens int32."""

    def __init__(self, cfg: Qwen35Config, rows: int, head_rows: int, n_pieces: int, stream: Any) -> None:
        hd = cfg.head_dim
        rows = -(-rows // 16) * 16
        widths = {
            "h": cfg.n_embd, "qkv": cfg.conv_dim, "conv_out": cfg.conv_dim, "z": cfg.value_dim,
            "a": cfg.ssm_dt_rank, "b": cfg.ssm_dt_rank, "qg": 2 * cfg.n_head * hd, "kb": cfg.n_head_kv * hd,
            "vb": cfg.n_head_kv * hd, "qr": cfg.n_head * hd, "part": cfg.n_head * n_pieces * (hd + 2),
            "g": cfg.n_ff, "u": cfg.n_ff, "h_last": cfg.n_embd,  # h_last: the runs' last rows (build_step)
            # the delta rule's prefill pipeline (kernels.py delta_rule)
            "qk_n": 2 * cfg.ssm_n_group * cfg.d_k, "gates": 2 * cfg.ssm_dt_rank, "o_raw": cfg.value_dim,
        }  # fmt: skip
        split_widths = {"xn": cfg.n_embd, "o2": cfg.value_dim, "att": cfg.n_head * hd, "act": cfg.n_ff}
        self.bufs = {k: DeviceBuffer(rows * w * F32_BYTES) for k, w in widths.items()}
        self.bufs["logits"] = DeviceBuffer(head_rows * cfg.n_vocab * F32_BYTES)
        self.splits: dict[str, Split] = {}
        for k, n in split_widths.items():  # xs [rows][n/4] uint4 then xsum [rows][n/16] float
            buf = DeviceBuffer(rows * n * F32_BYTES + rows * (n // 16) * F32_BYTES)
            self.bufs[k] = buf
            self.splits[k] = Split(int(buf), int(buf) + rows * n * F32_BYTES, n)
        for buf in self.bufs.values():
            buf.zero(stream)
        self.step = DeviceBuffer(3 * rows * 4)  # int32 [3][rows]
        self.out_tokens = DeviceBuffer(rows * 4)  # int32 [rows]
        self.rows, self.head_rows = rows, head_rows

    def __getitem__(self, name: str) -> int:
        return int(self.bufs[name])

    def split(self, name: str) -> Split:
        return self.splits[name]

    def tokens(self) -> int:
        return int(self.step)

    def slots(self) -> int:
        return int(self.step) + 4 * self.rows

    def pos(self) -> int:
        return int(self.step) + 8 * self.rows

    def free(self) -> None:
        for b in [*self.bufs.values(), self.step, self.out_tokens]:
            b.free()


def build_step(
    kt: KernelTable,
    cfg: Qwen35Config,
    W: DeviceWeights,
    A: Activations,
    pools: Pools,
    m: int,
    head: Head,
    max_ctx: int,
    run: int,
) -> list[Site]:
    """Launch sites of one step for rows 0..m-1 (see `Head` for the LM head).
    run: rows per slot run for the recurrent state, 1 for decode (m slots), m for a prefill chunk (one slot)."""
    D, eps = cfg.n_embd, cfg.rms_eps
    assert run >= 1 and m % run == 0 and (head != "last" or m // run <= A.head_rows), (m, head, run)
    emb = W.matrices["token_embd.weight"]
    ks: list[Site] = [kt.embed(qtype=emb.qtype, m=m, table=emb.ptr, tokens=A.tokens(), out=A["h"], n_embd=D)]
    gdn_i = attn_i = 0
    xn = kt.staged(A.split("xn"), m)  # (each GEMM reads x before the next producer writes the staged buffer)
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        ks.append(kt.rmsnorm(m=m, x=A["h"], w=W.vectors[p + "attn_norm.weight"], out=xn, eps=eps))
        if cfg.recurrent[i]:
            ks += _gdn(kt, cfg, W, A, pools, m, i, gdn_i, run)
            gdn_i += 1
        else:
            ks += _attention(kt, cfg, W, A, pools, m, i, attn_i, max_ctx, run)
            attn_i += 1
        ks.append(kt.rmsnorm(m=m, x=A["h"], w=W.vectors[p + "post_attention_norm.weight"], out=xn, eps=eps))
        ks += _ffn(kt, cfg, W, A, m, p)
    if head != "none":
        out = W.matrices["token_embd.weight" if cfg.tied_embeddings else "output.weight"]
        rows, h_row = (m, A["h"]) if head == "all" else (m // run, A["h"] + (run - 1) * D * F32_BYTES)
        if head == "last" and 1 < rows < m:  # several runs: their last rows side by side for the head
            ks.append(RowGather("gather_last_rows", A["h_last"], h_row, D * F32_BYTES, run * D * F32_BYTES, rows))
            h_row = A["h_last"]
        xh = kt.staged(A.split("xn"), rows)
        ks.append(kt.rmsnorm(m=rows, x=h_row, w=W.vectors["output_norm.weight"], out=xh, eps=eps))
        ks += kt.gemv(qtype=out.qtype, w=out.ptr, x=xh, outputs=[(A["logits"], cfg.n_vocab)], m=rows)
        ks.append(kt.argmax(m=rows, logits=A["logits"], tokens=int(A.out_tokens), n=cfg.n_vocab))
    return ks


def _projections(kt: KernelTable, W: DeviceWeights, A: Activations, m: int, layer: int, first: str) -> list[Kernel]:
    """The layer's projections of the normalized input, one launch per weight type (two side by side as the GEMM:
    KernelTable.projections)."""
    launches = [
        (g.qtype, g.ptr, [(A[PROJECTION_OUT[n.split(".")[2]]], W.matrices[n].n_out) for n in g.members])
        for g in W.group(layer, first)
    ]
    return kt.projections(x=kt.staged(A.split("xn"), m), launches=launches, m=m)


def _gdn(
    kt: KernelTable,
    cfg: Qwen35Config,
    W: DeviceWeights,
    A: Activations,
    pools: Pools,
    m: int,
    layer: int,
    li: int,
    run: int,
) -> list[Kernel]:
    """Gated DeltaNet layer li (§2.3): projections, conv step, delta rule, gated norm, out projection + residual."""
    M, V, p = W.matrices, W.vectors, f"blk.{layer}."
    conv_base = int(pools.conv) + F32_BYTES * li * pools.conv_layer
    s_base = int(pools.S) + F32_BYTES * li * pools.s_layer
    out, o2 = M[p + "ssm_out.weight"], kt.staged(A.split("o2"), m)
    conv = ConvIn(
        x=A["qkv"], w=V[p + "ssm_conv1d.weight"], state=conv_base, slot_stride=pools.conv_stride, kernel=cfg.ssm_d_conv
    )
    return _projections(kt, W, A, m, layer, "attn_qkv") + [
        *kt.delta_rule(
            m=m,
            d_k=cfg.d_k,
            conv_out=A["conv_out"],
            a=A["a"],
            b=A["b"],
            ssm_a=V[p + "ssm_a"],
            dt_bias=V[p + "ssm_dt.bias"],
            S=s_base,
            slot_stride=pools.s_stride,
            slots=A.slots(),
            z=A["z"],
            norm_w=V[p + "ssm_norm.weight"],
            out=o2,
            H_k=cfg.ssm_n_group,
            H_v=cfg.ssm_dt_rank,
            eps=cfg.rms_eps,
            run=run,
            qk_n=A["qk_n"],
            gates=A["gates"],
            o_raw=A["o_raw"],
            conv=conv,
            layer=li,
        ),
        *kt.gemv(qtype=out.qtype, w=out.ptr, x=o2, outputs=[(A["h"], cfg.n_embd)], m=m, res=A["h"]),
    ]


def _attention(
    kt: KernelTable,
    cfg: Qwen35Config,
    W: DeviceWeights,
    A: Activations,
    pools: Pools,
    m: int,
    layer: int,
    li: int,
    max_ctx: int,
    run: int,
) -> list[Kernel]:
    """Gated full-attention layer li (§2.4): q/k/v, norm + RoPE + KV store, split attention, gate, out + residual."""
    M, V, p = W.matrices, W.vectors, f"blk.{layer}."
    nh, nkv, hd = cfg.n_head, cfg.n_head_kv, cfg.head_dim
    k_base = int(pools.k) + F32_BYTES * li * pools.kv_layer
    v_base = int(pools.v) + F32_BYTES * li * pools.kv_layer
    n_pieces = (max_ctx + ATTN_PIECE - 1) // ATTN_PIECE
    out, att = M[p + "attn_output.weight"], kt.staged(A.split("att"), m)
    return _projections(kt, W, A, m, layer, "attn_q") + [
        kt.qk_norm_rope_store(
            m=m,
            qg=A["qg"],
            kb=A["kb"],
            vb=A["vb"],
            q_norm=V[p + "attn_q_norm.weight"],
            k_norm=V[p + "attn_k_norm.weight"],
            q_out=A["qr"],
            k_cache=k_base,
            v_cache=v_base,
            slot_stride=pools.kv_stride,
            slots=A.slots(),
            pos=A.pos(),
            n_head=nh,
            n_kv=nkv,
            hd=hd,
            max_ctx=max_ctx,
            n_rot=cfg.n_rot,
            theta=cfg.rope_theta,
            eps=cfg.rms_eps,
        ),
        kt.attn_partial(
            m=m,
            q=A["qr"],
            k_cache=k_base,
            v_cache=v_base,
            slot_stride=pools.kv_stride,
            slots=A.slots(),
            pos=A.pos(),
            part=A["part"],
            n_head=nh,
            n_kv=nkv,
            hd=hd,
            n_pieces=n_pieces,
            run=run,
        ),
        kt.attn_combine(m=m, part=A["part"], qg=A["qg"], pos=A.pos(), out=att, n_head=nh, hd=hd, n_pieces=n_pieces),
        *kt.gemv(qtype=out.qtype, w=out.ptr, x=att, outputs=[(A["h"], cfg.n_embd)], m=m, res=A["h"]),
    ]


def _ffn(kt: KernelTable, cfg: Qwen35Config, W: DeviceWeights, A: Activations, m: int, p: str) -> list[Kernel]:
    """SwiGLU MLP: gate and up in one launch when they share a tiled type, residual add fused into ffn_down."""
    M = W.matrices
    gate, up, down = M[p + "ffn_gate.weight"], M[p + "ffn_up.weight"], M[p + "ffn_down.weight"]
    x, act = kt.staged(A.split("xn"), m), A.split("act")
    if gate.qtype == up.qtype and gate.qtype in MMA_TYPES:
        first = kt.swiglu_gemv(qtype=gate.qtype, w_gate=gate.ptr, w_up=up.ptr, x=x, act=act, m=m)
        act = kt.swiglu_out(x=x, act=act, m=m)  # (staged by the SwiGLU GEMM for ffn_down's)
    else:
        first = [
            *kt.gemv(qtype=gate.qtype, w=gate.ptr, x=x, outputs=[(A["g"], cfg.n_ff)], m=m),
            *kt.gemv(qtype=up.qtype, w=up.ptr, x=x, outputs=[(A["u"], cfg.n_ff)], m=m),
            kt.swiglu_split(m=m, gate=A["g"], up=A["u"], out=act),
        ]
    return first + kt.gemv(qtype=down.qtype, w=down.ptr, x=act, outputs=[(A["h"], cfg.n_embd)], m=m, res=A["h"])
