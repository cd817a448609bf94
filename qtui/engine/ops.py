"""The layer math of the numpy reference engine, for ONE token of ONE sequence (reference/qwen35.md §2, §6).

Every function here takes a single token's vectors and the state of a single slot, and computes in float32.
The engine calls them once per (slot, token), whether that token is part of a prefill or one row of a
batched decode step, so a row's result cannot depend on which other rows share the step: batch invariance
by construction (DESIGN.md invariant 1). Matrix products are mat-vecs `W @ x` on one vector; a GEMM over
several rows would not be row-invariant in BLAS.

Weights are stored GGUF-style: numpy `W[out, in]` so `y = W @ x`; all norms are plain multipliers (the
converter baked HF's `1 + w` in); `ssm_a = -exp(A_log)`; value heads are tiled (v-head j uses k-head j % H_k).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from qtui.model.config import Qwen35Config

F32 = np.float32
# numpy's stubs type arithmetic on an ndarray of unknown dtype as Any: cast() gives mypy the ndarray back


# --- elementwise helpers (float32 in, float32 out) ---


def silu(x: np.ndarray) -> np.ndarray:
    return cast(np.ndarray, x * sigmoid(x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return cast(np.ndarray, F32(1.0) / (F32(1.0) + np.exp(-x)))


def softplus(x: np.ndarray) -> np.ndarray:
    """ggml's softplus: x where x > 20, else log1p(exp(x)) (ggml-cpu unary-ops.cpp:80-82)."""
    return np.where(x > F32(20.0), x, np.log1p(np.exp(np.minimum(x, F32(20.0)))))


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis. x: [..., n] f32, weight: [n] f32."""
    ms = np.mean(x * x, axis=-1, keepdims=True)  # [..., 1] f32
    return cast(np.ndarray, x / np.sqrt(ms + F32(eps)) * weight)


def l2_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(sum(x^2) + eps) over the last axis (llama.cpp build_gdn_l2_norm; HF l2norm with eps 1e-6)."""
    return cast(np.ndarray, x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + F32(eps)))


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, max-subtracted. x: [..., n] f32."""
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return cast(np.ndarray, e / np.sum(e, axis=-1, keepdims=True))


def rope_neox(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """NEOX (half-split) RoPE on the first n_rot dims: pairs (i, i + n_rot/2); the rest passes through.

    x: [heads, head_dim] f32; cos, sin: [n_rot/2] f32 for this position (§2.5).
    """
    half = cos.shape[0]
    x1, x2 = x[:, :half], x[:, half : 2 * half]  # [heads, n_rot/2] each
    out = x.copy()
    out[:, :half] = x1 * cos - x2 * sin
    out[:, half : 2 * half] = x2 * cos + x1 * sin
    return out


def rope_angles(pos: int, n_rot: int, theta_base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin of theta_i = pos * base^(-2i/n_rot), i < n_rot/2 (angles in float64, returned as f32)."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    angle = pos * theta_base ** (-2.0 * i / n_rot)  # [n_rot/2] f64, radians
    return np.cos(angle).astype(F32), np.sin(angle).astype(F32)


# --- per-layer weights (all dequantized f32, numpy order) ---


@dataclass(frozen=True, slots=True)
class FfnWeights:
    gate: np.ndarray  # [n_ff, D]
    up: np.ndarray  # [n_ff, D]
    down: np.ndarray  # [D, n_ff]


@dataclass(frozen=True, slots=True)
class GdnWeights:
    qkv: np.ndarray  # attn_qkv [conv_dim, D], rows [q (key_dim) | k (key_dim) | v (value_dim)]
    z: np.ndarray  # attn_gate [value_dim, D]
    beta: np.ndarray  # ssm_beta [H_v, D]
    alpha: np.ndarray  # ssm_alpha [H_v, D]
    conv: np.ndarray  # ssm_conv1d [conv_dim, d_conv]
    dt_bias: np.ndarray  # ssm_dt.bias [H_v]
    a: np.ndarray  # ssm_a [H_v] = -exp(A_log)
    norm: np.ndarray  # ssm_norm [d_v], shared by every value head
    out: np.ndarray  # ssm_out [D, value_dim]


@dataclass(frozen=True, slots=True)
class AttentionWeights:
    q: np.ndarray  # attn_q [n_head * 2 * head_dim, D], per head [query | gate]
    k: np.ndarray  # attn_k [n_kv * head_dim, D]
    v: np.ndarray  # attn_v [n_kv * head_dim, D]
    out: np.ndarray  # attn_output [D, n_head * head_dim]
    q_norm: np.ndarray  # [head_dim]
    k_norm: np.ndarray  # [head_dim]


# --- the three sublayers ---


def ffn(w: FfnWeights, x: np.ndarray) -> np.ndarray:
    """SwiGLU: down(silu(gate x) * up x). x: [D] f32 -> [D] f32."""
    return cast(np.ndarray, w.down @ (silu(w.gate @ x) * (w.up @ x)))


def gated_deltanet(
    w: GdnWeights, cfg: Qwen35Config, x: np.ndarray, conv_state: np.ndarray, s: np.ndarray
) -> np.ndarray:
    """One token through a Gated DeltaNet layer (§2.3 recurrent form, §6). Updates the slot's state in place.

    x: [D] f32; conv_state: [d_conv-1, conv_dim] f32 (the previous inputs of the causal conv);
    s: [H_v, d_k, d_v] f32 (the delta-rule state, never narrowed). Returns [D] f32.
    """
    h_k, h_v, d_k, d_v = cfg.ssm_n_group, cfg.ssm_dt_rank, cfg.d_k, cfg.d_v
    mixed = w.qkv @ x  # [conv_dim]
    z = (w.z @ x).reshape(h_v, d_v)  # [H_v, d_v]
    beta = sigmoid(w.beta @ x)  # [H_v]
    g = softplus(w.alpha @ x + w.dt_bias) * w.a  # [H_v] log-decay <= 0

    # causal depthwise conv over (3 cached inputs, this one): out[c] = sum_j window[j, c] * conv[c, j]
    window = np.concatenate([conv_state, mixed[None, :]], axis=0)  # [d_conv, conv_dim]
    conv_state[...] = window[1:]
    mixed = silu(np.sum(window * w.conv.T, axis=0))  # [conv_dim]

    q = mixed[: cfg.key_dim].reshape(h_k, d_k)  # [H_k, d_k]
    k = mixed[cfg.key_dim : 2 * cfg.key_dim].reshape(h_k, d_k)  # [H_k, d_k]
    v = mixed[2 * cfg.key_dim :].reshape(h_v, d_v)  # [H_v, d_v]
    q = l2_norm(q, cfg.rms_eps) * F32(1.0 / np.sqrt(d_k))
    k = l2_norm(k, cfg.rms_eps)
    k_head = np.arange(h_v) % h_k  # tiled GGUF layout: v-head j reads k-head j % H_k
    q, k = q[k_head], k[k_head]  # [H_v, d_k] each

    s *= np.exp(g)[:, None, None]  # decay:            S_h *= exp(g_h)
    kv_mem = np.einsum("hkv,hk->hv", s, k)  # [H_v, d_v]  S_h^T k_h
    delta = (v - kv_mem) * beta[:, None]  # [H_v, d_v]
    s += k[:, :, None] * delta[:, None, :]  # rank-1 update: S_h += k_h (x) delta_h
    o = np.einsum("hkv,hk->hv", s, q)  # [H_v, d_v]  S_h^T q_h

    o = rms_norm(o, w.norm, cfg.rms_eps) * silu(z)  # gated RMSNorm per head over d_v
    return cast(np.ndarray, w.out @ o.reshape(h_v * d_v))


def gated_attention(
    w: AttentionWeights, cfg: Qwen35Config, x: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, pos: int
) -> np.ndarray:
    """One token through a gated full-attention layer (§2.4, §6) at position `pos`; appends its K, V.

    x: [D] f32; k_cache, v_cache: [max_context, n_kv, head_dim] f32 for this slot (rows < pos are filled).
    Returns [D] f32.
    """
    n_head, n_kv, hd = cfg.n_head, cfg.n_head_kv, cfg.head_dim
    qg = (w.q @ x).reshape(n_head, 2, hd)  # [n_head, (query, gate), head_dim]
    q, gate = qg[:, 0], qg[:, 1].reshape(n_head * hd)  # [n_head, hd], [n_head*hd]
    q = rms_norm(q, w.q_norm, cfg.rms_eps)
    k = rms_norm((w.k @ x).reshape(n_kv, hd), w.k_norm, cfg.rms_eps)  # [n_kv, hd]
    v = (w.v @ x).reshape(n_kv, hd)  # [n_kv, hd]
    cos, sin = rope_angles(pos, cfg.n_rot, cfg.rope_theta)
    q, k = rope_neox(q, cos, sin), rope_neox(k, cos, sin)
    k_cache[pos], v_cache[pos] = k, v

    keys, values = k_cache[: pos + 1], v_cache[: pos + 1]  # [T, n_kv, hd] each, T = pos + 1
    q = q.reshape(n_kv, n_head // n_kv, hd)  # q-head h uses kv-head h // (n_head/n_kv)
    scores = np.einsum("kgd,tkd->kgt", q, keys) * F32(1.0 / np.sqrt(hd))  # [n_kv, group, T]
    attn = np.einsum("kgt,tkd->kgd", softmax(scores), values)  # [n_kv, group, hd]
    return cast(np.ndarray, w.out @ (attn.reshape(n_head * hd) * sigmoid(gate)))
