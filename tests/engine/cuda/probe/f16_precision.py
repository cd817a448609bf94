"""Precision of the split formats in numpy (ptx/PERF.md "One scale per super-block"): main's bf16 hi + lo split,
the fp16 2^4 hi + 2^-8 lo split of branch f16-split, and Q6_K with its q * sc products only rounded to fp16.
Relative error of x @ W^T against float64 with x exact. CPU only, not a test.

    python3 tests/engine/cuda/probe/f16_precision.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def fp16_split(x: np.ndarray, hi_scale: float = 2.0**-4, lo_scale: float = 2.0**8) -> np.ndarray:
    """x as 2^a hi + 2^-b lo, hi = rn(x / 2^a), lo = rn((x - 2^a hi) 2^b) (branch f16-split: a = 4, b = 8)."""
    hi = (x.astype(np.float32) * np.float32(hi_scale)).astype(np.float16)
    lo = ((x.astype(np.float64) - hi.astype(np.float64) / hi_scale) * lo_scale).astype(np.float16)
    return hi.astype(np.float64) / hi_scale + lo.astype(np.float64) / lo_scale


def main() -> int:
    from qtui.engine.cuda.splitfmt import join, split
    from tests.engine.cuda.quantdata import random_weight

    rng = np.random.default_rng(0)
    n_out, n_in, m = 512, 2560, 16
    print(f"{'type':5} {'x':16} {'bf16 split':>11} {'fp16 split':>11} {'+ rn(q sc)':>11}")
    for qtype in ("q4_k", "q6_k"):
        raw, deq = random_weight(qtype, n_out, n_in, rng)
        deq64 = deq.astype(np.float64)
        rounded = deq64
        if qtype == "q6_k":  # d * rn16((v - 32) sc): the product alone rounded to fp16
            d = raw.reshape(n_out, -1, 210)[:, :, 208:210].copy().view(np.float16).astype(np.float64)[..., 0]
            p = np.rint(deq64.reshape(n_out, -1, 256) / d[..., None])
            rounded = (d[..., None] * p.astype(np.float16).astype(np.float64)).reshape(n_out, n_in)
        spikes = np.where(rng.random((m, n_in)) < 0.01, 1000, 1)
        for name, x in (
            ("randn", rng.standard_normal((m, n_in))),
            ("randn * 0.01", rng.standard_normal((m, n_in)) * 0.01),
            ("randn, spikes", rng.standard_normal((m, n_in)) * spikes),
        ):
            x = x.astype(np.float32)
            ref = x.astype(np.float64) @ deq64.T

            def err(xv: np.ndarray, w: np.ndarray, ref: np.ndarray = ref) -> float:
                return float(np.linalg.norm(xv @ w.T - ref) / np.linalg.norm(ref))

            bf16 = join(split(x)[0]).astype(np.float64)
            print(f"{qtype:5} {name:16} {err(bf16, deq64):11.2e} {err(fp16_split(x), deq64):11.2e}", end="")
            print(f" {err(fp16_split(x), rounded):11.2e}" if qtype == "q6_k" else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
