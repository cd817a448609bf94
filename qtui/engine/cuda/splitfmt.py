"""The split activation format of ptx/split.cuh in numpy: the host-side oracle of what the producers write
and the GEMVs read (tests, tools). x = 2^4 hi + 2^-8 lo, both fp16 (hi = rn(2^-4 x), lo = rn(2^8 (x - 2^4 hi))):
22 significant bits for |x| in [2^-10, 2^19), an absolute 2^-33 below (from 2^19 on lo may overflow).

    xs   [rows][n/4][4] uint32: quad q of values v0..v3 = x[4q .. 4q+3] as
         (hi(v0) | hi(v2) << 16, hi(v1) | hi(v3) << 16, lo(v0) | lo(v2) << 16, lo(v1) | lo(v3) << 16)
    xsum [rows][n/16] float32: the 16 values of each slice, each 2^4 hi + 2^-8 lo, summed as ((q0 + q1) + (q2 + q3))
         over its quads, each quad ((v0 + v1) + (v2 + v3)).
"""

from __future__ import annotations

from typing import cast

import numpy as np

HI_SCALE, LO_SCALE = np.float32(2.0**-4), np.float32(2.0**8)  # ptx/split.cuh SPLIT_HI_SCALE, SPLIT_LO_SCALE


def f16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> fp16 bits (uint32 in [0, 65536)), round to nearest even (numpy's cast, as cvt.rn.f16.f32)."""
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(x, np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)


def f16_value(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def value(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """The float32 value of fp16 term bits (hi, lo): 2^4 hi + 2^-8 lo (exact)."""
    return f16_value(hi) / HI_SCALE + f16_value(lo) / LO_SCALE


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x float32 [rows][n] (n % 16 == 0) -> (xs uint32 [rows][n/4][4], xsum float32 [rows][n/16])."""
    x = np.ascontiguousarray(x, np.float32)
    hi = f16_round(x * HI_SCALE)
    lo = f16_round((x - f16_value(hi) / HI_SCALE) * LO_SCALE)
    seen = value(hi, lo)

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
    """xs uint32 [rows][n/4][4] -> the float32 values the GEMVs see (2^4 hi + 2^-8 lo) [rows][n]."""
    xs = np.asarray(xs, np.uint32)
    lo16, hi16 = xs & 0xFFFF, xs >> 16
    v = np.stack(
        [
            value(lo16[..., 0], lo16[..., 2]),
            value(lo16[..., 1], lo16[..., 3]),
            value(hi16[..., 0], hi16[..., 2]),
            value(hi16[..., 1], hi16[..., 3]),
        ],
        axis=-1,
    )
    return v.reshape(*xs.shape[:-2], -1)
