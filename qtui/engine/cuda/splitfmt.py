"""The split activation format of ptx/split.cuh in numpy: the host-side oracle of what the producers write
and the GEMVs read (tests, tools). x = hi + lo, both bf16 (hi = rn(x), lo = rn(x - hi)).

    xs   [rows][n/4][4] uint32: quad q of values v0..v3 = x[4q .. 4q+3] as
         (hi(v0) | hi(v2) << 16, hi(v1) | hi(v3) << 16, lo(v0) | lo(v2) << 16, lo(v1) | lo(v3) << 16)
    xsum [rows][n/16] float32: the 16 values of each slice, each hi + lo, summed as ((q0 + q1) + (q2 + q3))
         over its quads, each quad ((v0 + v1) + (v2 + v3)).
"""

from __future__ import annotations

from typing import cast

import numpy as np


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint32 in [0, 65536)), round to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(np.isnan(x), (u >> 16) | 0x40, r).astype(np.uint32)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x float32 [rows][n] (n % 16 == 0) -> (xs uint32 [rows][n/4][4], xsum float32 [rows][n/16])."""
    x = np.ascontiguousarray(x, np.float32)
    hi = bf16_round(x)
    lo = bf16_round(x - bf16_value(hi))
    seen = bf16_value(hi) + bf16_value(lo)

    def q(a: np.ndarray) -> np.ndarray:  # [rows][n] -> [rows][n/4][4]
        return a.reshape(*x.shape[:-1], -1, 4)

    h, l4 = q(hi), q(lo)
    xs = np.stack(
        [
            h[..., 0] | h[..., 2] << 16,
            h[..., 1] | h[..., 3] << 16,
            l4[..., 0] | l4[..., 2] << 16,
            l4[..., 1] | l4[..., 3] << 16,
        ],
        axis=-1,
    ).astype(np.uint32)
    return xs, slice_sums(seen)


def slice_sums(seen: np.ndarray) -> np.ndarray:
    """xsum of values already in split form (hi + lo) [rows][n]: float32, in the kernels' order."""
    s = np.asarray(seen, np.float32).reshape(*seen.shape[:-1], -1, 4)
    quad = ((s[..., 0] + s[..., 1]) + (s[..., 2] + s[..., 3])).reshape(*seen.shape[:-1], -1, 4)
    return cast(np.ndarray, ((quad[..., 0] + quad[..., 1]) + (quad[..., 2] + quad[..., 3])).astype(np.float32))


def join(xs: np.ndarray) -> np.ndarray:
    """xs uint32 [rows][n/4][4] -> the float32 values the GEMVs see (hi + lo) [rows][n]."""
    xs = np.asarray(xs, np.uint32)
    lo16, hi16 = xs & 0xFFFF, xs >> 16
    v = np.stack(
        [
            bf16_value(lo16[..., 0]) + bf16_value(lo16[..., 2]),
            bf16_value(lo16[..., 1]) + bf16_value(lo16[..., 3]),
            bf16_value(hi16[..., 0]) + bf16_value(hi16[..., 2]),
            bf16_value(hi16[..., 1]) + bf16_value(hi16[..., 3]),
        ],
        axis=-1,
    )
    return v.reshape(*xs.shape[:-2], -1)
