"""Q2_K / Q3_K block encoders, vectorised numpy (ggml quantize_row_q{2,3}_K_ref in spirit, no imatrix).

Layouts (ggml-common.h), 256 values per block, 16 sub-blocks of 16:
  Q2_K 84 B: scales[16] (lo nibble: 4-bit scale, hi nibble: 4-bit min) | qs[64] (2-bit) | d f16 | dmin f16
             y = d * sc * q - dmin * m,  q in [0, 3]
  Q3_K 110 B: hmask[32] (bit 2 of q) | qs[64] (bits 0-1) | scales[12] (16 x 6-bit) | d f16
             y = d * (sc - 32) * (q - 4),  q in [0, 7]  (a clear hmask bit means "subtract 4")
2-bit field order in qs (both): half n (128 values), byte l < 32 holds L[128n + l + 32k] at bits 2k, k = 0..3.
Q2_K fits each sub-block's (scale, min) like make_qkx2_quants with Q2_K's settings (weights |x|, absolute
error, 16 candidates from nmax - 0.5); Q3_K fits a signed scale like make_q3_quants (weights x^2, here a
scan of candidate scales rather than ggml's coordinate descent). Both then quantize the scales against an
f16 super-scale and re-round every value against the scales as stored.
"""

from __future__ import annotations

import numpy as np

from qtui.model.quant_kquants import f16_bytes, fit_scale_min, fit_symmetric, quantize_scales, requantize

_F32 = np.float32


def pack_2bit(levels: np.ndarray) -> np.ndarray:
    """L u8 [nb, 256] (low 2 bits used) -> qs [nb, 64]: byte 32n + l = sum_k L[128n + 32k + l] << 2k."""
    lv = (levels & 3).reshape(-1, 2, 4, 32)  # [block, half n, k, l]
    qs = lv[:, :, 0] | (lv[:, :, 1] << 2) | (lv[:, :, 2] << 4) | (lv[:, :, 3] << 6)
    return qs.reshape(-1, 64)


def encode_q2_k(blocks: np.ndarray) -> np.ndarray:
    """float32 [nb, 256] -> Q2_K bytes [nb, 84]."""
    nb = blocks.shape[0]
    sub = blocks.reshape(nb * 16, 16).astype(_F32)
    scale, mn = fit_scale_min(sub, 3, 15, weights=np.abs(sub), rmin=-0.5, rdelta=0.1, mad=True)
    d, sc = quantize_scales(scale.reshape(nb, 16), 15)
    dmin, m = quantize_scales(mn.reshape(nb, 16), 15)
    ds = (d.astype(_F32)[:, None] * sc.astype(_F32))[:, :, None]  # [nb, 16, 1], the decoder's float32 products
    dm = (dmin.astype(_F32)[:, None] * m.astype(_F32))[:, :, None]
    levels = requantize(blocks.reshape(nb, 16, 16).astype(_F32), ds, dm, 3).reshape(nb, 256)
    return np.concatenate([sc | (m << 4), pack_2bit(levels), f16_bytes(d), f16_bytes(dmin)], axis=1)


def pack_q3_scales(ls: np.ndarray) -> np.ndarray:
    """6-bit codes ls [nb, 16] (scale + 32) -> the 12-byte Q3_K scales field.

    Scale k: low nibble in byte k % 8 (low half for k < 8, high half after), bits 4-5 in byte 8 + k % 4 at
    bit 2 (k // 4) (the inverse of dequantize_row_q3_K's kmask1 / kmask2 shuffle).
    """
    out = np.zeros((ls.shape[0], 12), dtype=np.uint8)
    out[:, 0:8] = (ls[:, 0:8] & 0xF) | ((ls[:, 8:16] & 0xF) << 4)
    for k in range(16):
        out[:, 8 + k % 4] |= (ls[:, k] >> 4) << (2 * (k // 4))
    return out


def encode_q3_k(blocks: np.ndarray) -> np.ndarray:
    """float32 [nb, 256] -> Q3_K bytes [nb, 110]."""
    nb = blocks.shape[0]
    scale = fit_symmetric(blocks.reshape(nb * 16, 16).astype(_F32), nmax=4).reshape(nb, 16)
    idx = np.argmax(np.abs(scale), axis=1)
    smax = scale[np.arange(nb), idx]  # signed: it maps to sc - 32 = -32
    iscale = np.where(smax != 0, -32.0 / np.where(smax != 0, smax, 1.0), 0.0)
    d = np.where(iscale != 0, 1.0 / np.where(iscale != 0, iscale, 1.0), 0.0).astype(np.float16)
    sc = np.clip(np.rint(iscale[:, None] * scale), -32, 31).astype(np.int16)  # [nb, 16]
    ds = (d.astype(_F32)[:, None] * sc.astype(_F32))[:, :, None]  # the decoder's float32 product
    inv = np.where(ds != 0, 1.0 / np.where(ds != 0, ds, 1.0), 0.0)
    x = blocks.reshape(nb, 16, 16).astype(_F32)
    levels = (np.clip(np.rint(x * inv), -4, 3) + 4).astype(np.uint8).reshape(nb, 256)
    hi = (levels >> 2).reshape(nb, 8, 32)  # value 32b + l: its bit 2 goes to bit b of hmask[l]
    hmask = np.zeros((nb, 32), dtype=np.uint8)
    for b in range(8):
        hmask |= hi[:, b] << b
    qs = pack_2bit(levels)
    scales = pack_q3_scales((sc + 32).astype(np.uint8))
    return np.concatenate([hmask, qs, scales, f16_bytes(d)], axis=1)
