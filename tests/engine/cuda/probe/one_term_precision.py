"""How far would one fp16 term per activation move the logits? (not a test: a CPU reading aid, ptx/PERF.md)

    python3 tests/engine/cuda/probe/one_term_precision.py MODEL.gguf [--steps 64] [--trials 3] [--only head,gate,...]
        [--format f16|bf16|q8_1]

The kernels read each activation as two fp16 terms, x = 2^4 hi + 2^-8 lo (ptx/split.cuh: 22 significant bits), and
run one MMA chain per term. Dropping the lo term would halve the GEMMs' MMAs (the GEMM probe GEMM_PROBE_NO_LO times
that); this measures its price. Two numpy ReferenceEngines run the same greedy decode from one random prompt; in the
second, every matrix product (or only those named by --only: head, gate, up, down, qkv, z, beta, alpha, out, q, k, v)
sees x rounded to the hi term alone, 2^4 rn16(2^-4 x) (--format f16); for comparison, --format bf16 rounds x to
bf16 (what a bf16-activation server computes with) and q8_1 to llama.cpp's q8_1 blocks (32 values, d = amax / 127
as fp16, q = round(x / d): what its quantized GEMMs multiply). Printed per trial: the largest and median of max |logit
difference| / max |logit| over the steps (test_engine.py holds the CUDA engine to 2e-3 of that), and where the greedy
tokens part, with the exact engine's top-2 margin there.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

MATRICES = ("gate", "up", "down", "qkv", "z", "beta", "alpha", "out", "q", "k", "v")


def hi_term(x: np.ndarray) -> np.ndarray:
    """x as the tensor cores would see its hi term alone (float32; the split format's hi, splitfmt.split)."""
    from qtui.engine.cuda.splitfmt import HI_SCALE, f16_round, f16_value

    return f16_value(f16_round(np.asarray(x, np.float32) * HI_SCALE)) / HI_SCALE


def bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bf16 (nearest, ties to even), as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def q8_1(x: np.ndarray) -> np.ndarray:
    """x through llama.cpp's q8_1 blocks of 32 (quantize_row_q8_1: d = amax / 127, q = round(x / d)), as float32."""
    blocks = np.asarray(x, np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    q = np.round(np.divide(blocks, d, out=np.zeros_like(blocks), where=d > 0))
    return (q * d.astype(np.float16).astype(np.float32)).reshape(np.shape(x))


FORMATS = {"f16": hi_term, "bf16": bf16, "q8_1": q8_1}


class Rounded:
    """A weight matrix whose products see x rounded by `fmt`."""

    def __init__(self, w: np.ndarray, fmt) -> None:
        self.w, self.fmt = w, fmt
        self.ndim = w.ndim

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        return self.w @ self.fmt(x)


def round_products(engine, names: set[str], fmt) -> None:
    """Wrap the engine's matrices named in `names` (head: the LM head) in Rounded."""

    def wrapped(weights):
        fields = {f.name: getattr(weights, f.name) for f in dataclasses.fields(weights)}
        return dataclasses.replace(
            weights, **{k: Rounded(w, fmt) for k, w in fields.items() if k in names and getattr(w, "ndim", 0) == 2}
        )

    if "head" in names:
        engine._head = Rounded(engine._head, fmt)
    engine._ffn = [wrapped(f) for f in engine._ffn]
    engine._mixer = [wrapped(m) for m in engine._mixer]


def main() -> int:
    from qtui.engine.reference import ReferenceEngine
    from qtui.model.gguf_file import GGUFModel

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--only", default=",".join(("head", *MATRICES)))
    ap.add_argument("--format", choices=FORMATS, default="f16")
    args = ap.parse_args()

    model = GGUFModel.open(args.model)
    exact = ReferenceEngine(model, max_slots=1, max_context=args.steps + 16)
    one_term = ReferenceEngine(model, max_slots=1, max_context=args.steps + 16)
    round_products(one_term, set(args.only.split(",")), FORMATS[args.format])
    rng = np.random.default_rng()
    for trial in range(args.trials):
        prompt = rng.integers(0, model.config.n_vocab, 12).tolist()
        sa, sb = exact.alloc_slot(), one_term.alloc_slot()
        la, lb = exact.prefill_logits(sa, prompt), one_term.prefill_logits(sb, prompt)
        errs, parted = [], "no"
        for step in range(args.steps):
            scale = float(np.abs(la).max())
            errs.append(float(np.abs(la - lb).max()) / scale)
            ta, tb = int(np.argmax(la)), int(np.argmax(lb))
            if ta != tb:
                top = np.sort(la)[-2:]
                parted = f"at step {step}, top-2 margin {(top[1] - top[0]) / scale:.1e} of max |logit|"
                break
            la, lb = exact.decode_logits([sa], [ta])[0], one_term.decode_logits([sb], [tb])[0]
        print(f"trial {trial}: {len(errs)} steps, rel. logit error max {max(errs):.2e} median "
              f"{float(np.median(errs)):.2e}; greedy tokens parted: {parted}")  # fmt: skip
        exact.free_slot(sa)
        one_term.free_slot(sb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
