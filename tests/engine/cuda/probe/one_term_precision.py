"""How far would one fp16 term per activation move the logits? (not a test: a CPU reading aid, ptx/PERF.md)

    python3 tests/engine/cuda/probe/one_term_precision.py MODEL.gguf [--steps 64] [--trials 3] [--only head,gate,...]

The kernels read each activation as two fp16 terms, x = 2^4 hi + 2^-8 lo (ptx/split.cuh: 22 significant bits), and
run one MMA chain per term. Dropping the lo term would halve the GEMMs' MMAs (the GEMM probe GEMM_PROBE_NO_LO times
that); this measures its price. Two numpy ReferenceEngines run the same greedy decode from one random prompt; in the
second, every matrix product (or only those named by --only: head, gate, up, down, qkv, z, beta, alpha, out, q, k, v)
sees x rounded to the hi term alone, 2^4 rn16(2^-4 x). Printed per trial: the largest and median of max |logit
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
    """x as the tensor cores would see its hi term alone (float32)."""
    scaled = np.asarray(x, np.float32) * np.float32(2**-4)
    return scaled.astype(np.float16).astype(np.float32) * np.float32(2**4)


class HiOnly:
    """A weight matrix whose products see only the hi term of x."""

    def __init__(self, w: np.ndarray) -> None:
        self.w = w
        self.ndim = w.ndim

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        return self.w @ hi_term(x)


def round_products(engine, names: set[str]) -> None:
    """Wrap the engine's matrices named in `names` (head: the LM head) in HiOnly."""

    def wrapped(weights):
        fields = {f.name: getattr(weights, f.name) for f in dataclasses.fields(weights)}
        return dataclasses.replace(
            weights, **{k: HiOnly(w) for k, w in fields.items() if k in names and getattr(w, "ndim", 0) == 2}
        )

    if "head" in names:
        engine._head = HiOnly(engine._head)
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
    args = ap.parse_args()

    model = GGUFModel.open(args.model)
    exact = ReferenceEngine(model, max_slots=1, max_context=args.steps + 16)
    one_term = ReferenceEngine(model, max_slots=1, max_context=args.steps + 16)
    round_products(one_term, set(args.only.split(",")))
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
