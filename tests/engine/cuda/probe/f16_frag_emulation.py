"""Numpy emulation of the fp16 fragment bit tricks of branch f16-split (ptx/PERF.md "One scale per super-block"):
prmt / lop3 / fp16x2 round-to-nearest arithmetic, exhaustive over the inputs each trick meets. CPU only, not a
test (the constants are copied from ptx/mma.cuh of that branch).

    python3 tests/engine/cuda/probe/f16_frag_emulation.py    # prints the mismatches per trick (all 0)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

F1024 = 0x64006400  # fp16x2 (1024, 1024)
KVALUES = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]


def bias(off: int) -> int:
    return F1024 + 0x00010001 * off


def halves(w: int) -> tuple[float, float]:
    return tuple(float(np.uint16((w >> s) & 0xFFFF).view(np.float16)) for s in (0, 16))  # type: ignore[return-value]


def pack(a: float, b: float) -> int:
    lo, hi = np.array([a, b], np.float16).view(np.uint16)
    return int(lo) | int(hi) << 16


def h2(op: Callable[..., float], *ws: int) -> int:
    """An fp16x2 operation: each half computed exactly in float64, rounded once to fp16 (fma.rn / mul.rn / sub.rn)."""
    args = [halves(w) for w in ws]
    return pack(*(float(np.float16(op(*(a[i] for a in args)))) for i in (0, 1)))


def h2sub(a: int, b: int) -> int:
    return h2(lambda x, y: x - y, a, b)


def h2mul(a: int, b: int) -> int:
    return h2(lambda x, y: x * y, a, b)


def h2fma(a: int, b: int, c: int) -> int:
    return h2(lambda x, y, z: x * y + z, a, b, c)


def prmt(x: int, y: int, sel: int) -> int:
    b = [(x >> (8 * i)) & 0xFF for i in range(4)] + [(y >> (8 * i)) & 0xFF for i in range(4)]
    return sum(b[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))


def s8(b: int) -> int:
    return b - 256 if b >= 128 else b


def ubyte(w: int, j: int, off: int = 0) -> int:  # f16x2_ubyte<OFF>
    return h2sub(prmt(w, 0x64646464, j | 0x40 | (j << 8) | 0x4000), bias(off))


def sbyte(w: int, j: int) -> int:  # f16x2_sbyte
    return h2sub(prmt(w ^ 0x80808080, 0x64646464, j | 0x40 | (j << 8) | 0x4000), bias(128))


def sbytes(lo: int, hi: int, k: int) -> int:  # f16x2_sbytes
    b = prmt(lo ^ 0x80808080, hi ^ 0x80808080, k | ((k + 4) << 8))
    return h2sub((b & 0x00FF00FF) | F1024, bias(128))


def main() -> int:
    rng = np.random.default_rng(0)
    bad: dict[str, int] = {}

    def check(name: str, got: int | tuple[float, float], want: tuple[float, float]) -> None:
        bad[name] = bad.get(name, 0) + ((halves(got) if isinstance(got, int) else got) != want)

    for b in range(256):
        for j in range(4):
            w = (b << (8 * j)) | (0x5A << (8 * ((j + 1) % 4)))
            check("ubyte", ubyte(w, j), (b, b))
            check("ubyte - 32", ubyte(w, j, 32), (b - 32, b - 32))
            check("sbyte", sbyte(w, j), (s8(b), s8(b)))
    for v in range(64):
        check("int - 32", h2sub(F1024 | v | v << 16, bias(32)), (v - 32, v - 32))
    for _ in range(4000):
        lo, hi, k = int(rng.integers(0, 2**32)), int(rng.integers(0, 2**32)), int(rng.integers(0, 4))
        check("sbytes", sbytes(lo, hi, k), (s8((lo >> 8 * k) & 255), s8((hi >> 8 * k) & 255)))
        first = 2 * int(rng.integers(0, 2))
        pair = h2sub(prmt(lo ^ 0x80808080, 0x64646464, first | 0x40 | ((first + 1) << 8) | 0x4000), bias(128))
        check("q8_0 pair16", pair, (s8((lo >> 8 * first) & 255), s8((lo >> 8 * (first + 1)) & 255)))
    for v in range(32):  # fold_biased: (1024 + v) sc - 1024 sc in one fma (Q4_K, Q5_K, Q2_K)
        for sc in range(64):
            s2 = pack(sc, sc)
            check("fold_biased", h2fma(F1024 | v | v << 16, s2, h2mul(s2, 0xE400E400)), (v * sc, v * sc))
    for name, qs, scs in (("rem q6_k", range(-32, 32), range(-128, 128)), ("rem iq4_xs", KVALUES, range(-32, 32))):
        for q in qs:  # fold_rem: A = rn(q sc), e = q sc - A in {-1, 0, 1}
            for sc in scs:
                a = h2mul(pack(q, q), pack(sc, sc))
                e = h2fma(pack(q, q), pack(sc, sc), a ^ 0x80008000)
                A, E = halves(a)[0], halves(e)[0]
                check(name, (A + E, abs(E) <= 1), (q * sc, True))
    for v in range(8):  # Q3_K: (v - 4) (sc - 32) exact
        for sc in range(64):
            check("q3_k", h2mul(h2sub(F1024 | v | v << 16, bias(4)), ubyte(sc, 0, 32)), ((v - 4) * (sc - 32),) * 2)
    for A in range(-128, 129):  # lo_frag: A 2^-12 exact
        check("lo_frag", h2mul(pack(A, A), 0x0C000C00), (A * 2.0**-12,) * 2)
    for name, n in bad.items():
        print(f"{name:14} mismatches {n}")
    return int(any(bad.values()))


if __name__ == "__main__":
    raise SystemExit(main())
