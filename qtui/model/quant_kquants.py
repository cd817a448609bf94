"""Q4_K / Q5_K / Q6_K block encoders and a random valid-block generator, vectorised numpy.

Layouts (reference/qwen35.md §5, ggml-common.h), 256 values per block:
  Q4_K 144 B: d f16 | dmin f16 | scales[12] (8 x 6-bit scale, 8 x 6-bit min) | qs[128] (4-bit)
  Q5_K 176 B: d f16 | dmin f16 | scales[12] | qh[32] (5th bit) | qs[128]
  Q6_K 210 B: ql[128] | qh[64] | scales int8[16] | d f16
Decode: Q4_K/Q5_K y = (d*sc[s]) * q - (dmin*m[s]) over 8 sub-blocks of 32; Q6_K y = (d*sc[s]) * (q - 32)
over 16 sub-blocks of 16. Each encoder fits per-sub-block (scale, min) by a weighted least-squares search
over candidate scales (ggml make_qkx2_quants / make_qx_quants in spirit, not bit-identical), quantizes the
scales to 6/8 bits against an f16 super-scale, then re-rounds every value against the *stored* scales so the
bytes decode to the best values those scales allow.
"""

from __future__ import annotations

from typing import cast

import gguf
import numpy as np

QK_K = 256
QT = gguf.GGMLQuantizationType
RANDOM_TYPES = frozenset({QT.Q4_K, QT.Q5_K, QT.Q6_K})  # what random_kquant_blocks draws
_F32 = np.float32


def _round(x: np.ndarray) -> np.ndarray:
    """Round half away from zero (ggml nearest_int for the values we see)."""
    return cast(np.ndarray, np.sign(x) * np.floor(np.abs(x) + 0.5))


def fit_scale_min(x: np.ndarray, nmax: int, nstep: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """x [n, 32] -> (scale [n] >= 0, mn [n] >= 0) with x ~= scale * L - mn, L in [0, nmax].

    Weighted LS (weights av|x| + |x|, as ggml's Q4_K) over nstep+1 candidate inverse scales.
    """
    w = np.sqrt(np.mean(x * x, axis=1, keepdims=True)) + np.abs(x)
    xmin = np.minimum(x.min(axis=1), 0.0)
    xmax = x.max(axis=1)
    span = np.where(xmax > xmin, xmax - xmin, 1.0)
    best_scale = (xmax - xmin) / nmax
    best_min = xmin
    best_err = _weighted_err(x, w, best_scale, best_min, nmax)
    sw, sx = w.sum(1), (w * x).sum(1)
    for step in range(nstep + 1):
        iscale = (-1.0 + 0.1 * step + nmax) / span
        lv = np.clip(_round(iscale[:, None] * (x - xmin[:, None])), 0, nmax)
        sl, sl2, sxl = (w * lv).sum(1), (w * lv * lv).sum(1), (w * x * lv).sum(1)
        det = sw * sl2 - sl * sl
        ok = det > 0
        safe = np.where(ok, det, 1.0)
        scale = (sw * sxl - sx * sl) / safe
        mn = (sl2 * sx - sl * sxl) / safe
        pos = mn > 0  # the min must be <= 0 (stored as -min >= 0): refit the scale alone
        scale = np.where(pos, sxl / np.where(sl2 > 0, sl2, 1.0), scale)
        mn = np.where(pos, 0.0, mn)
        err = (w * (scale[:, None] * lv + mn[:, None] - x) ** 2).sum(1)  # with this candidate's levels
        better = ok & (err < best_err) & (scale >= 0)
        best_scale = np.where(better, scale, best_scale)
        best_min = np.where(better, mn, best_min)
        best_err = np.where(better, err, best_err)
    return np.maximum(best_scale, 0.0), -best_min


def _weighted_err(x: np.ndarray, w: np.ndarray, scale: np.ndarray, mn: np.ndarray, nmax: int) -> np.ndarray:
    inv = np.where(scale > 0, 1.0 / np.where(scale > 0, scale, 1.0), 0.0)
    lv = np.clip(_round((x - mn[:, None]) * inv[:, None]), 0, nmax)
    return cast(np.ndarray, (w * (scale[:, None] * lv + mn[:, None] - x) ** 2).sum(1))


def quantize_scales(vals: np.ndarray, nmax: int = 63) -> tuple[np.ndarray, np.ndarray]:
    """vals [nb, k] >= 0 -> (f16 super-scale [nb], codes [nb, k] in [0, nmax]) with vals ~= f16 * code."""
    vmax = vals.max(axis=1)
    inv = np.where(vmax > 0, nmax / np.where(vmax > 0, vmax, 1.0), 0.0)
    codes = np.clip(_round(vals * inv[:, None]), 0, nmax).astype(np.uint8)
    return (vmax / nmax).astype(np.float16), codes


def requantize(x: np.ndarray, ds: np.ndarray, dm: np.ndarray, nmax: int) -> np.ndarray:
    """Round x [nb, n_sub, sub] against stored scales: L = round((x + dm) / ds) in [0, nmax] (0 where ds == 0)."""
    inv = np.where(ds > 0, 1.0 / np.where(ds > 0, ds, 1.0), 0.0)
    return cast(np.ndarray, np.clip(_round((x + dm) * inv), 0, nmax).astype(np.uint8))


def pack_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """6-bit sc, m [nb, 8] -> the 12-byte Q4_K/Q5_K scales field (inverse of get_scale_min_k4)."""
    q = np.empty((sc.shape[0], 12), dtype=np.uint8)
    q[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    q[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    q[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    return q


def _fit_asymmetric(blocks: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """blocks [nb, 256] -> (d f16 [nb], dmin f16 [nb], sc u8 [nb,8], m u8 [nb,8], L u8 [nb,256])."""
    nb = blocks.shape[0]
    sub = blocks.reshape(nb * 8, 32).astype(_F32)
    scale, mn = fit_scale_min(sub, nmax)
    d, sc = quantize_scales(scale.reshape(nb, 8))
    dmin, m = quantize_scales(mn.reshape(nb, 8))
    # the decoder's own float32 products, so the re-rounding targets exactly what will be decoded
    ds = (d.astype(_F32)[:, None] * sc.astype(_F32))[:, :, None]
    dm = (dmin.astype(_F32)[:, None] * m.astype(_F32))[:, :, None]
    levels = requantize(blocks.reshape(nb, 8, 32).astype(_F32), ds, dm, nmax)
    return d, dmin, sc, m, levels.reshape(nb, QK_K)


def _pack_nibbles(levels: np.ndarray) -> np.ndarray:
    """L [nb, 256] (low 4 bits used) -> qs [nb, 128]: chunk c byte l = L[64c+l] | L[64c+32+l] << 4."""
    lv = (levels & 0xF).reshape(-1, 4, 2, 32)
    return (lv[:, :, 0, :] | (lv[:, :, 1, :] << 4)).reshape(-1, 128)


def encode_q4_k(blocks: np.ndarray) -> np.ndarray:
    """float32 [nb, 256] -> Q4_K bytes [nb, 144]."""
    d, dmin, sc, m, levels = _fit_asymmetric(blocks, 15)
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), pack_scales(sc, m), _pack_nibbles(levels)], axis=1)


def encode_q5_k(blocks: np.ndarray) -> np.ndarray:
    """float32 [nb, 256] -> Q5_K bytes [nb, 176]."""
    d, dmin, sc, m, levels = _fit_asymmetric(blocks, 31)
    hi = (levels >> 4).reshape(-1, 8, 32)  # sub-block s = 2c (+1): its 5th bit goes to bit s of qh[l]
    qh = np.zeros((levels.shape[0], 32), dtype=np.uint8)
    for s in range(8):
        qh |= hi[:, s, :] << s
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), pack_scales(sc, m), qh, _pack_nibbles(levels)], axis=1)


def f16_bytes(v: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(v.astype(np.float16)).view(np.uint8).reshape(-1, 2)


def fit_symmetric(x: np.ndarray, nmax: int = 32, nstep: int = 9) -> np.ndarray:
    """x [n, 16] -> signed scale [n] with x ~= scale * L, L in [-nmax, nmax-1] (ggml make_qx_quants, rmse 1).

    The extreme value maps to -nmax; candidates nudge that inverse scale by 0.1 steps and keep the one
    maximising (sum w x L)^2 / sum w L^2 with weights x^2, i.e. the least weighted squared error.
    """
    idx = np.argmax(np.abs(x), axis=1)
    vmax = x[np.arange(x.shape[0]), idx]
    safe = np.where(vmax != 0, vmax, 1.0)
    w = x * x
    best_scale = np.zeros(x.shape[0])
    best_obj = np.full(x.shape[0], -1.0)
    for step in range(-nstep, nstep + 1):
        iscale = -(nmax + 0.1 * step) / safe
        lv = np.clip(_round(iscale[:, None] * x), -nmax, nmax - 1)
        slx, sll = (w * x * lv).sum(1), (w * lv * lv).sum(1)
        ok = sll > 0
        obj = np.where(ok, slx * slx / np.where(ok, sll, 1.0), -1.0)
        better = obj > best_obj
        best_scale = np.where(better & ok, slx / np.where(ok, sll, 1.0), best_scale)
        best_obj = np.where(better, obj, best_obj)
    return np.where(vmax != 0, best_scale, 0.0)


def encode_q6_k(blocks: np.ndarray) -> np.ndarray:
    """float32 [nb, 256] -> Q6_K bytes [nb, 210]."""
    nb = blocks.shape[0]
    scale = fit_symmetric(blocks.reshape(nb * 16, 16).astype(_F32)).reshape(nb, 16)
    idx = np.argmax(np.abs(scale), axis=1)
    smax = scale[np.arange(nb), idx]  # signed: it maps to -128
    iscale = np.where(smax != 0, -128.0 / np.where(smax != 0, smax, 1.0), 0.0)
    d = np.where(smax != 0, 1.0 / np.where(iscale != 0, iscale, 1.0), 0.0).astype(np.float16)
    sc = np.clip(_round(iscale[:, None] * scale), -128, 127).astype(np.int8)
    ds = (d.astype(_F32)[:, None] * sc.astype(_F32))[:, :, None]  # [nb, 16, 1], the decoder's float32 product
    inv = np.where(ds != 0, 1.0 / np.where(ds != 0, ds, 1.0), 0.0)
    x = blocks.reshape(nb, 16, 16).astype(_F32)
    levels = (np.clip(_round(x * inv), -32, 31) + 32).astype(np.uint8).reshape(nb, QK_K)
    return pack_q6_k(levels, sc, d)


def pack_q6_k(levels: np.ndarray, sc: np.ndarray, d: np.ndarray) -> np.ndarray:
    """L u8 [nb, 256] in [0, 63], sc int8 [nb, 16], d f16 [nb] -> Q6_K bytes [nb, 210].

    Half n (128 values), l < 32: q1..q4 = L[128n + l + 32k], k = 0..3;
    ql[64n+l] = q1 lo | q3 lo << 4, ql[64n+32+l] = q2 lo | q4 lo << 4, qh[32n+l] = hi2(q1..q4) at bits 0,2,4,6.
    """
    nb = levels.shape[0]
    q = levels.reshape(nb, 2, 4, 32)  # [block, half n, k, l]
    lo, hi = q & 0xF, q >> 4
    ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], axis=2)  # [nb, 2, 64]
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)  # [nb, 2, 32]
    return np.concatenate(
        [ql.reshape(nb, 128), qh.reshape(nb, 64), sc.view(np.uint8).reshape(nb, 16), f16_bytes(d)], axis=1
    )


def random_kquant_blocks(qtype: QT, n_blocks: int, rng: np.random.Generator, std: float) -> np.ndarray:
    """n_blocks random valid K-quant blocks, uint8 [n_blocks, type_size], values ~ zero-mean with ~std.

    Every quant/scale bit is uniform random; only d/dmin are set: d so the spread is ~std (with a per-block
    jitter in [0.5, 1.5)), and Q4_K/Q5_K dmin = d * nmax/2 so min offsets centre the sub-block means.
    """
    _, size = gguf.GGML_QUANT_SIZES[qtype]
    out = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    jitter = rng.random(n_blocks, dtype=np.float32) + np.float32(0.5)
    if qtype == QT.Q6_K:
        # y = d * sc * (q - 32), sc ~ U[-128, 127] (rms ~74), q - 32 ~ U[-32, 31] (rms ~18.5)
        out[:, 208:210] = f16_bytes(np.float32(std / (74.0 * 18.5)) * jitter)
        return out
    nmax = 15 if qtype == QT.Q4_K else 31
    # y = d * (sc * q - nmax/2 * m), sc, m ~ U[0, 63], q ~ U[0, nmax]; rms of the bracket ~ 36 * nmax * 0.55
    d = np.float32(std / (36.0 * nmax * 0.55)) * jitter
    out[:, 0:2] = f16_bytes(d)
    out[:, 2:4] = f16_bytes(d * np.float32(nmax / 2))
    return out
