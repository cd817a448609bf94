"""Load-time weight layout for the tensor-core kernels (ptx/mma.cuh): the same bytes as the GGUF rows, rearranged
into 16-row tiles so that each lane of a warp reads its quants with coalesced 16-byte loads and the scales sit
apart from the quants.

A matrix [n_out][n_in] becomes n_tiles = ceil(n_out / 16) tiles (rows past n_out are zero bytes, so they
dequantize to 0 and are never stored) of n_in / 256 UNITS each, tile-major: unit (tile, sb) holds rows
16*tile .. +16 of super-block sb (256 values). Inside a unit, lane = 4g + t of slice s (values 16s .. 16s+15)
owns rows g and g + 8 at values 16s + 4t + v, v = 0..3, in the order of the mma.sync A fragment:
register k = 2*(v & 1) + hr holds value v of row g + 8*hr in its low (v < 2) or high (v >= 2) half. The
nibble of (v, hr) in the lane's 32-bit quant word of the slice is 2v + hr. Layouts per type (byte offsets in
the unit) are documented beside each format in ptx/mma.cuh; `unpack` below reads them back independently.

`qtui info` and the weight byte counts are unchanged: a unit holds exactly 16 rows x one super-block of the
GGUF bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

from qtui.model.quant_ldecode import KVALUES_IQ4NL

ROWS = 16  # rows per tile (the MMA's M)
SB = 256  # values per super-block / unit column
# Bytes of one 16-row unit per type (16 x the GGUF bytes per 256 values).
UNIT_BYTES = {
    "q4_k": 2304,
    "q5_k": 2816,
    "q6_k": 3360,
    "q8_0": 4352,
    "q4_0": 2304,
    "q4_1": 2560,
    "q5_0": 2816,
    "q5_1": 3072,
    "iq4_nl": 2304,
    "iq4_xs": 2176,
    "q2_k": 1344,
    "q3_k": 1760,
}
TILED_TYPES = tuple(UNIT_BYTES)
LEGACY_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")  # 32-value blocks: 8 per unit column
IQ4_VALUES = KVALUES_IQ4NL.astype(np.float32)  # the IQ4_NL / IQ4_XS codebook


def n_tiles(n_out: int) -> int:
    return (n_out + ROWS - 1) // ROWS


def tiled_nbytes(qtype: str, n_out: int, n_in: int) -> int:
    return n_tiles(n_out) * (n_in // SB) * UNIT_BYTES[qtype]


# ---- GGUF block decoding into small integers (vectorised over [..., 256]) ----


def _q4_k_parts(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K super-blocks [..., 144] -> (headers [..., 16], values 0..15 [..., 256])."""
    qs = b[..., 16:144].reshape(*b.shape[:-1], 4, 32)
    vals = np.concatenate([qs & 0xF, qs >> 4], axis=-1)  # chunk c: values 64c + l (low), 64c + 32 + l (high)
    return b[..., :16], vals.reshape(*b.shape[:-1], 256)


def _q5_k_parts(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q5_K [..., 176] = d, dmin, scales 12, qh 32, qs 128 -> (headers [..., 16], values 0..31 [..., 256])."""
    qh = b[..., 16:48]
    qs = b[..., 48:176].reshape(*b.shape[:-1], 4, 32)
    c = np.arange(4).reshape(4, 1)
    lo = (qs & 0xF) | (((qh[..., None, :] >> (2 * c)) & 1) << 4)
    hi = (qs >> 4) | (((qh[..., None, :] >> (2 * c + 1)) & 1) << 4)
    vals = np.concatenate([lo, hi], axis=-1)
    return b[..., :16], vals.reshape(*b.shape[:-1], 256).astype(np.uint8)


def _q6_k_parts(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q6_K [..., 210] = ql 128, qh 64, scales 16 (int8), d f16 -> (scales [..., 16], d [..., 2], values 0..63)."""
    ql = b[..., :128].reshape(*b.shape[:-1], 2, 64)
    qh = b[..., 128:192].reshape(*b.shape[:-1], 2, 32)
    a, bb = ql[..., :32], ql[..., 32:]
    parts = [a & 0xF | ((qh & 3) << 4), bb & 0xF | (((qh >> 2) & 3) << 4),
             a >> 4 | (((qh >> 4) & 3) << 4), bb >> 4 | (((qh >> 6) & 3) << 4)]  # fmt: skip
    vals = np.concatenate(parts, axis=-1)  # half n: values 128n + 32q + l
    return b[..., 192:208], b[..., 208:210], vals.reshape(*b.shape[:-1], 256).astype(np.uint8)


def _q8_0_parts(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q8_0 super-rows of 8 blocks [..., 272] -> (d [..., 16] bytes: 8 f16, values int8 [..., 256])."""
    blk = b.reshape(*b.shape[:-1], 8, 34)
    return blk[..., :2].reshape(*b.shape[:-1], 16), blk[..., 2:].reshape(*b.shape[:-1], 256)


def _blocks32(b: np.ndarray, bb: int) -> np.ndarray:
    """Super-rows of 8 blocks of 32 values [..., 8 * bb] -> [..., 8, bb]."""
    return b.reshape(*b.shape[:-1], 8, bb)


def _nibbles32(qs: np.ndarray) -> np.ndarray:
    """The 16 quant bytes of each 32-value block [..., 8, 16] -> values [..., 256]: low nibbles are values
    0..15 of the block, high nibbles 16..31 (ggml's Q4_0 / Q4_1 / Q5_x / IQ4_NL order)."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=-1).reshape(*qs.shape[:-2], 256)


def _high32(qh: np.ndarray) -> np.ndarray:
    """Q5_0 / Q5_1 qh [..., 8, 4] (a little-endian u32 per block, bit i = value i's 5th bit) -> [..., 256]."""
    bits = (qh[..., :, None] >> np.arange(8, dtype=np.uint8)) & 1  # [..., 8, 4 bytes, 8 bits]
    return bits.reshape(*qh.shape[:-2], 256)


def _legacy_parts(qtype: str, b: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL super-rows -> (values [..., 256] (IQ4_NL: codebook indices),
    [d bytes [..., 16] (8 f16), m bytes [..., 16] for the _1 types])."""
    lay = {"q4_0": (18, False, False), "q4_1": (20, True, False), "q5_0": (22, False, True),
           "q5_1": (24, True, True), "iq4_nl": (18, False, False)}  # fmt: skip
    bb, has_m, has_h = lay[qtype]
    blk = _blocks32(b, bb)
    off = 4 if has_m else 2
    vals = _nibbles32(blk[..., off + 4 * has_h :])
    if has_h:
        vals = vals | (_high32(blk[..., off : off + 4]) << 4)
    heads = [blk[..., 0:2].reshape(*b.shape[:-1], 16)]
    if has_m:
        heads.append(blk[..., 2:4].reshape(*b.shape[:-1], 16))
    return vals.astype(np.uint8), heads


def _iq4_xs_parts(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ4_XS [..., 136] = d f16, scales_h u16, scales_l[4], qs[128] -> (header [..., 8], indices [..., 256])."""
    qs = b[..., 8:136].reshape(*b.shape[:-1], 8, 16)  # 16 bytes per 32-value group: low nibbles first
    return b[..., :8], _nibbles32(qs).astype(np.uint8)


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """Q2_K / Q3_K qs [..., 64] -> 2-bit values [..., 256]: value 128n + 32j + l = bits 2j of qs[32n + l]."""
    x = qs.reshape(*qs.shape[:-1], 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(4, 1)
    return (x & 3).reshape(*qs.shape[:-1], 256)


def _q2_k_parts(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q2_K [..., 84] = scales[16] (scale | min << 4), qs[64], d, dmin -> (scales, d|dmin [..., 4], values 0..3)."""
    return b[..., :16], b[..., 80:84], _crumbs(b[..., 16:80]).astype(np.uint8)


def _q3_k_parts(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q3_K [..., 110] = hmask[32], qs[64], scales[12], d -> (scales [..., 12], d [..., 2], values 0..7 standing
    for v - 4: bit 2 = bit j of hmask[l] for value 32j + l)."""
    hbit = (b[..., :32, None] >> np.arange(8, dtype=np.uint8)) & 1  # [..., l, j]
    hbit = np.swapaxes(hbit, -1, -2).reshape(*b.shape[:-1], 256)
    return b[..., 96:108], b[..., 108:110], (_crumbs(b[..., 32:96]) | (hbit << 2)).astype(np.uint8)


# ---- lane-major arrangement of one [tiles, sb, 16 rows, 256] array of small values ----


def _lane_view(vals: np.ndarray) -> np.ndarray:
    """[T, S, 16 rows, 256] -> [T, S, s 16, g 8, t 4, v 4, hr 2]: value 16s + 4t + v of row g + 8hr."""
    T, S = vals.shape[:2]
    x = vals.reshape(T, S, 2, 8, 16, 4, 4)  # [T, S, hr, g, s, t, v]
    return x.transpose(0, 1, 4, 3, 5, 6, 2)


def _nibble_words(v4: np.ndarray) -> np.ndarray:
    """4-bit values [..., s, g, t, v, hr] -> uint32 words [..., s, lane]: nibble 2v + hr, i.e. byte v holds
    (hr=0 | hr=1 << 4), little-endian (uint8 work only: fast)."""
    b = np.ascontiguousarray(v4[..., 0] | (v4[..., 1] << 4))  # [..., s, g, t, v] bytes
    return b.view(np.uint32).reshape(*b.shape[:-3], 32)


def _quad_segments(words: np.ndarray) -> np.ndarray:
    """Words [T, S, n_words_per_lane, 32 lanes] -> bytes [T, S, ...]: segment j holds lane L's 16 bytes at
    16L, i.e. words 4j .. 4j+3 of that lane."""
    T, S, n, _ = words.shape
    x = words.reshape(T, S, n // 4, 4, 32).transpose(0, 1, 2, 4, 3)  # [T, S, seg, lane, word]
    return np.ascontiguousarray(x).view(np.uint8).reshape(T, S, -1)


def _high_words(hv: np.ndarray, bits: int) -> np.ndarray:
    """High bits [T, S, s, g, t, v, hr] -> uint32 words [T, S, n_words, 32 lanes]. Pair k = 2(v & 1) + hr of
    slice s sits at bit p + 16(v >> 1) of word s // per_word, with per_word = 4 and p = 4(s % 4) + k for 1 bit
    (Q5_K), per_word = 2 and p = 8(s % 2) + 2k for 2 bits (Q6_K): each byte gathers 8 / bits fields."""
    T, S = hv.shape[:2]
    per_word = 4 if bits == 1 else 2
    x = hv.reshape(T, S, 16 // per_word, per_word, 8, 4, 2, 2, 2)  # [w, s%pw, g, t, vh, vl, hr]
    f = x.astype(np.uint8)
    if bits == 1:  # bit 16vh + 4(s%4) + 2vl + hr: byte 2vh + (s%4)//2, bit 4((s%4)%2) + 2vl + hr
        f = f.reshape(T, S, 4, 2, 2, 8, 4, 2, 2, 2)  # [w, s4hi, s4lo, g, t, vh, vl, hr]
        byte = f[..., 0, 0] | f[..., 0, 1] << 1 | f[..., 1, 0] << 2 | f[..., 1, 1] << 3  # [w, hi, lo, g, t, vh]
        byte = byte[:, :, :, :, 0] | (byte[:, :, :, :, 1] << 4)  # [w, s4hi, g, t, vh]
        order = byte.transpose(0, 1, 2, 4, 5, 6, 3)  # [w, g, t, vh, s4hi]
    else:  # bit 16vh + 8(s%2) + 4vl + 2hr: byte 2vh + s%2, bits 4vl + 2hr
        byte = f[..., 0, 0] | f[..., 0, 1] << 2 | f[..., 1, 0] << 4 | f[..., 1, 1] << 6  # [w, s%2, g, t, vh]
        order = byte.transpose(0, 1, 2, 4, 5, 6, 3)  # [w, g, t, vh, s%2]
    b4 = np.ascontiguousarray(order).reshape(T, S, 16 // per_word, 32, 4)  # byte 2vh + (s4hi | s%2)
    return b4.view(np.uint32).reshape(T, S, 16 // per_word, 32)


def _tiles(raw: np.ndarray, n_out: int, row_bytes: int, sb_bytes: int) -> np.ndarray:
    """Raw rows [n_out][row_bytes] -> [T, S, 16 rows, sb_bytes] (zero rows padded)."""
    T, S = n_tiles(n_out), row_bytes // sb_bytes
    padded = np.zeros((T * ROWS, row_bytes), np.uint8)
    padded[:n_out] = raw.reshape(n_out, row_bytes)
    return padded.reshape(T, ROWS, S, sb_bytes).transpose(0, 2, 1, 3)


def repack(qtype: str, raw: np.ndarray, n_out: int, n_in: int) -> np.ndarray:
    """GGUF rows (uint8 [n_out][row_bytes]) -> the tiled layout (uint8, tiled_nbytes bytes)."""
    sb_bytes = UNIT_BYTES[qtype] // ROWS
    u = _tiles(np.asarray(raw, np.uint8), n_out, n_in // SB * sb_bytes, sb_bytes)
    T, S = u.shape[:2]
    if qtype in ("q4_k", "q5_k"):
        hdr, vals = (_q4_k_parts if qtype == "q4_k" else _q5_k_parts)(u)
        lanes = _lane_view(vals)
        parts = [_quad_segments(_nibble_words(lanes & 0xF))]
        if qtype == "q5_k":
            parts.append(_quad_segments(_high_words(lanes >> 4, 1)))
        parts.append(hdr.reshape(T, S, 256))
    elif qtype == "q6_k":
        sc, d, vals = _q6_k_parts(u)
        lanes = _lane_view(vals)
        parts = [
            _quad_segments(_nibble_words(lanes & 0xF)),
            _quad_segments(_high_words(lanes >> 4, 2)),
            sc.reshape(T, S, 256),
            d.reshape(T, S, 32),
        ]
    elif qtype == "q8_0":  # slice bytes at pos = 4*(v & 1) + 2*hr + (v >> 1): word i = v & 1 of the slice
        d, vals = _q8_0_parts(u)
        x = _lane_view(vals).reshape(T, S, 16, 8, 4, 2, 2, 2)  # [s, g, t, v >> 1, v & 1, hr]
        b = np.ascontiguousarray(x.transpose(0, 1, 2, 3, 4, 6, 7, 5)).reshape(T, S, 16, 32, 8)
        words = b.view(np.uint32).transpose(0, 1, 2, 4, 3).reshape(T, S, 32, 32)  # word 2s + i of each lane
        parts = [_quad_segments(words), d.reshape(T, S, 256)]
    elif qtype in LEGACY_TYPES:
        vals, heads = _legacy_parts(qtype, u)
        lanes = _lane_view(vals)
        parts = [_quad_segments(_nibble_words(lanes & 0xF))]
        if qtype in ("q5_0", "q5_1"):
            parts.append(_quad_segments(_high_words(lanes >> 4, 1)))
        parts += [h.reshape(T, S, 256) for h in heads]
    elif qtype == "iq4_xs":
        hdr, vals = _iq4_xs_parts(u)
        parts = [_quad_segments(_nibble_words(_lane_view(vals))), hdr.reshape(T, S, 128)]
    elif qtype in ("q2_k", "q3_k"):  # 2-bit words laid out as Q6_K's high bits; Q3_K's bit 2 as Q5_K's bit 4
        sc, d, vals = (_q2_k_parts if qtype == "q2_k" else _q3_k_parts)(u)
        lanes = _lane_view(vals)
        parts = [_quad_segments(_high_words(lanes & 3, 2))]
        if qtype == "q3_k":
            parts.append(_quad_segments(_high_words(lanes >> 2, 1)))
        parts += [sc.reshape(T, S, -1), d.reshape(T, S, -1)]
    else:
        raise ValueError(f"no tiled layout for {qtype}")
    out = np.concatenate(parts, axis=-1)
    assert out.shape[-1] == UNIT_BYTES[qtype], (qtype, out.shape)
    return np.ascontiguousarray(out).reshape(-1)


# ---- reading the tiled layout back (independent of the kernels: the CPU oracle of the layout) ----


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _k_scales(hdr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """16-byte K-quant headers [..., 16] -> (d*sc, dmin*m) [..., 8] float32 (get_scale_min_k4)."""
    d, dmin = _f16(hdr[..., 0:2])[..., 0], _f16(hdr[..., 2:4])[..., 0]
    q = hdr[..., 4:16].astype(np.uint32)
    sc = np.empty(hdr.shape[:-1] + (8,), np.uint32)
    mn = np.empty_like(sc)
    sc[..., :4], mn[..., :4] = q[..., 0:4] & 63, q[..., 4:8] & 63
    sc[..., 4:] = (q[..., 8:12] & 0xF) | ((q[..., 0:4] >> 6) << 4)
    mn[..., 4:] = (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 6) << 4)
    return d[..., None] * sc.astype(np.float32), dmin[..., None] * mn.astype(np.float32)


def _iq4_xs_scales(hdr: np.ndarray) -> np.ndarray:
    """IQ4_XS headers [..., 8] = d, scales_h u16, scales_l[4] -> d * (ls - 32) [..., 8] float32."""
    d = _f16(hdr[..., 0:2])[..., 0]
    sh = np.ascontiguousarray(hdr[..., 2:4]).view(np.uint16)[..., 0].astype(np.int32)
    j = np.arange(8)
    lo = (hdr[..., 4 + j // 2].astype(np.int32) >> (4 * (j % 2))) & 0xF
    ls = lo | (((sh[..., None] >> (2 * j)) & 3) << 4)
    return d[..., None] * (ls - 32).astype(np.float32)


def _q3_k_scales(sc: np.ndarray) -> np.ndarray:
    """Q3_K's 12 scale bytes [..., 12] -> the 16 signed scales (6-bit - 32) [..., 16] float32: low 4 bits from
    byte j (j < 8) or the high nibble of byte j - 8, high 2 bits from byte 8 + j % 4 at bit 2 (j // 4)."""
    j = np.arange(16)
    b = sc.astype(np.int32)
    lo = np.where(j < 8, b[..., j % 8] & 0xF, b[..., j % 8] >> 4)
    hi = (b[..., 8 + j % 4] >> (2 * (j // 4))) & 3
    return cast(np.ndarray, ((lo | (hi << 4)) - 32).astype(np.float32))


def _lane_words(unit: np.ndarray, start: int, n_words: int) -> np.ndarray:
    """Words of each lane from `n_words / 4` 512-byte segments at `start`: [..., 32 lanes, n_words]."""
    seg = unit[..., start : start + 128 * n_words].reshape(*unit.shape[:-1], n_words // 4, 32, 16)
    w = np.ascontiguousarray(seg).view(np.uint32)  # [..., seg, lane, 4]
    return np.moveaxis(w, -3, -2).reshape(*unit.shape[:-1], 32, n_words)


def _unlane(per_lane: np.ndarray) -> np.ndarray:
    """[..., s 16, lane 32, v 4, hr 2] -> [..., 16 rows, 256] (row g + 8hr, value 16s + 4t + v)."""
    x = per_lane.reshape(*per_lane.shape[:-4], 16, 8, 4, 4, 2)  # [..., s, g, t, v, hr]
    nd = x.ndim
    x = np.moveaxis(x, [nd - 1, nd - 4, nd - 5, nd - 3, nd - 2], [nd - 5, nd - 4, nd - 3, nd - 2, nd - 1])
    return x.reshape(*per_lane.shape[:-4], 16, 256)


def _nibbles_of(words: np.ndarray) -> np.ndarray:
    """Quant words [..., lane, 16 slices] -> [..., s, lane, v, hr] low nibbles (nibble 2v + hr)."""
    w = np.swapaxes(words, -1, -2)[..., None, None]
    sh = (4 * (2 * np.arange(4)[:, None] + np.arange(2)[None, :])).astype(np.uint32)
    return (w >> sh) & 0xF


def _bits_of(
    words: np.ndarray, slices_per_word: int, bits: int, pos: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    """High-bit words [..., lane, n] -> [..., s, lane, v, hr] fields of pair k = 2(v & 1) + hr at pos(s, k)."""
    s = np.arange(16).reshape(16, 1, 1, 1)
    v = np.arange(4).reshape(1, 1, 4, 1)
    hr = np.arange(2).reshape(1, 1, 1, 2)
    k = 2 * (v & 1) + hr
    w = np.swapaxes(words, -1, -2)[..., s[:, 0, 0, 0] // slices_per_word, :]  # [..., s, lane]
    return cast(np.ndarray, (w[..., None, None] >> (pos(s, k) + 16 * (v >> 1)).astype(np.uint32)) & ((1 << bits) - 1))


def unpack(qtype: str, tiled: np.ndarray, n_out: int, n_in: int) -> np.ndarray:
    """The tiled layout -> the dequantized matrix [n_out][n_in] float32 (the layout's CPU oracle)."""
    T, S, U = n_tiles(n_out), n_in // SB, UNIT_BYTES[qtype]
    unit = np.asarray(tiled, np.uint8).reshape(T, S, U)
    if qtype in ("q4_k", "q5_k"):
        q = _unlane(_nibbles_of(_lane_words(unit, 0, 16)).astype(np.float32))
        if qtype == "q5_k":
            hb = _bits_of(_lane_words(unit, 2048, 4), 4, 1, lambda s, k: 4 * (s % 4) + k)
            q = q + 16 * _unlane(hb.astype(np.float32))
        hdr = unit[..., U - 256 :].reshape(T, S, 16, 16)
        sc, mn = _k_scales(hdr)  # [T, S, 16 rows, 8 groups]
        w = np.repeat(sc, 32, axis=-1) * q - np.repeat(mn, 32, axis=-1)
    elif qtype == "q6_k":
        lo = _nibbles_of(_lane_words(unit, 0, 16))
        hi = _bits_of(_lane_words(unit, 2048, 8), 2, 2, lambda s, k: 8 * (s % 2) + 2 * k)
        q = _unlane((lo | (hi << 4)).astype(np.float32)) - 32
        sc = unit[..., 3072:3328].reshape(T, S, 16, 16).view(np.int8).astype(np.float32)
        d = _f16(unit[..., 3328:3360].reshape(T, S, 16, 2))[..., 0]
        w = np.repeat(d[..., None] * sc, 16, axis=-1) * q
    elif qtype == "q8_0":
        b = np.ascontiguousarray(_lane_words(unit, 0, 32)).view(np.int8)  # [T, S, lane, 32 words x 4 bytes]
        b = b.reshape(T, S, 32, 16, 2, 2, 2)  # [lane, s, v & 1, hr, v >> 1]
        q = b.transpose(0, 1, 3, 2, 6, 4, 5).reshape(T, S, 16, 32, 4, 2)  # [s, lane, v, hr]
        q = _unlane(q.astype(np.float32))
        d = _f16(unit[..., 4096:].reshape(T, S, 16, 8, 2))[..., 0]
        w = np.repeat(d, 32, axis=-1) * q
    elif qtype in LEGACY_TYPES or qtype == "iq4_xs":
        q = _unlane(_nibbles_of(_lane_words(unit, 0, 16)).astype(np.float32))
        off = 2048
        if qtype in ("q5_0", "q5_1"):
            hb = _bits_of(_lane_words(unit, 2048, 4), 4, 1, lambda s, k: 4 * (s % 4) + k)
            q, off = q + 16 * _unlane(hb.astype(np.float32)), 2560
        if qtype.startswith("iq4"):
            q = IQ4_VALUES[q.astype(np.intp)]
        else:
            q = q - {"q4_0": 8, "q5_0": 16}.get(qtype, 0)
        if qtype == "iq4_xs":
            d = np.repeat(_iq4_xs_scales(unit[..., 2048:].reshape(T, S, 16, 8)), 32, axis=-1)
        else:
            d = np.repeat(_f16(unit[..., off : off + 256].reshape(T, S, 16, 8, 2))[..., 0], 32, axis=-1)
        w = d * q
        if qtype in ("q4_1", "q5_1"):
            w = w + np.repeat(_f16(unit[..., off + 256 : off + 512].reshape(T, S, 16, 8, 2))[..., 0], 32, axis=-1)
    elif qtype in ("q2_k", "q3_k"):
        q = _unlane(_bits_of(_lane_words(unit, 0, 8), 2, 2, lambda s, k: 8 * (s % 2) + 2 * k).astype(np.float32))
        if qtype == "q2_k":
            sc = unit[..., 1024:1280].reshape(T, S, 16, 16)
            dd = _f16(unit[..., 1280:1344].reshape(T, S, 16, 2, 2))[..., 0]  # [T, S, row, (d, dmin)]
            dl = dd[..., 0:1] * (sc & 0xF).astype(np.float32)
            ml = dd[..., 1:2] * (sc >> 4).astype(np.float32)
            w = np.repeat(dl, 16, axis=-1) * q - np.repeat(ml, 16, axis=-1)
        else:
            hb = _bits_of(_lane_words(unit, 1024, 4), 4, 1, lambda s, k: 4 * (s % 4) + k)
            q = q + 4 * _unlane(hb.astype(np.float32)) - 4
            d = _f16(unit[..., 1728:1760].reshape(T, S, 16, 2))[..., 0]
            dl = d[..., None] * _q3_k_scales(unit[..., 1536:1728].reshape(T, S, 16, 12))
            w = np.repeat(dl, 16, axis=-1) * q
    else:
        raise ValueError(f"no tiled layout for {qtype}")
    full = w.transpose(0, 2, 1, 3).reshape(T * ROWS, n_in)  # [T, 16, S, 256] -> rows
    return cast(np.ndarray, full[:n_out])
