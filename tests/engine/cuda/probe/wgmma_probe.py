"""On the GPU: one wgmma k16 step vs one mma.sync m16n8k16 step, bitwise, on chains of CH steps of random data.
bf16 (main's arithmetic): A small integers as the dequantized weights are, B bf16 of random magnitude. fp16
(branch f16-split's): A the folded products rn(q sc) up to 4096, B fp16 terms of random magnitude, all-subnormal B
among them (a tensor core that flushed fp16 subnormals would return zeros there: "max rel err" 1). wg0 / wgs0: the
wgmma with A from registers / from shared memory; wg1 / wgs1, the controls, read B / A through a descriptor with its
two strides swapped (wrong products everywhere). Prints the mismatch counts."""

import sys
from pathlib import Path

import numpy as np

from qtui.engine.cuda import driver as drv

HERE = Path(__file__).resolve().parent


def bf16(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32)


def f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).view(np.uint16)


def from_f16(u: np.ndarray) -> np.ndarray:
    return u.view(np.float16).astype(np.float32)


def operands(mode: str, rng: np.random.Generator, shape_a: tuple, shape_b: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) as uint16 bits for one mode."""
    sign = rng.choice([-1.0, 1.0], size=shape_b) * rng.uniform(1, 2, size=shape_b)
    if mode in ("wide", "hilo"):
        A = bf16(rng.integers(-64, 64, size=shape_a).astype(np.float32))
        if mode == "wide":
            mag = np.exp2(rng.uniform(-24, 6, size=shape_b))
        else:  # hi terms ~1, lo terms ~2^-9 alternately, as the split activations
            lo_hi = np.where(np.arange(shape_b[1]) % 2 == 0, 2.0**-9, 1.0)[None, :, None, None]
            mag = np.exp2(rng.normal(0, 2, size=shape_b)) * lo_hi
        return A, bf16(mag * sign)
    A = f16((rng.integers(-32, 32, size=shape_a) * rng.integers(-128, 128, size=shape_a)).astype(np.float32))
    if mode == "wide16":  # fp16's whole range, subnormals included
        mag = np.exp2(rng.uniform(-24, 14, size=shape_b))
    elif mode == "sub16":  # every B subnormal
        mag = np.exp2(rng.uniform(-24, -15, size=shape_b))
    else:  # "hilo16": hi terms ~ x 2^-4, lo terms ~ the rest times 2^8 (split.cuh of f16-split)
        mag = np.exp2(rng.normal(-4, 3, size=shape_b))
    return A, f16(mag * sign)


def main() -> int:
    from cuda.bindings import driver as cu

    drv.primary_context()
    print(drv.device_name())
    image = (HERE / "wgmma_probe.ptx").read_bytes() + b"\0"
    mod = drv.check(cu.cuModuleLoadData(image), "load")
    names = [f"{k}_n{n}" for k in ("sync", "wg", "wgs", "sync_f16", "wg_f16", "wgs_f16") for n in (8, 64)]
    fn = {n: drv.check(cu.cuModuleGetFunction(mod, n.encode()), n) for n in names}
    rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    stream = drv.new_stream()
    CH, NP = 4, 4096
    bad_total = 0
    for N in (8, 64):
        for mode in ("wide", "hilo", "wide16", "sub16", "hilo16"):
            half = mode.endswith("16")
            A, B = operands(mode, rng, (NP, CH, 64, 16), (NP, CH, N, 16))
            dA, dB = drv.DeviceBuffer(A.nbytes), drv.DeviceBuffer(B.nbytes)
            dA.upload(A, stream)
            dB.upload(B, stream)
            outs = {}
            for name, extra in (("sync", []), ("wg0", [0]), ("wg1", [1]), ("wgs0", [0]), ("wgs1", [1])):
                o = drv.DeviceBuffer(NP * 64 * N * 4)
                kn = fn[f"{name.rstrip('01')}{'_f16' if half else ''}_n{N}"]
                args = [(int(dA), np.uint64), (int(dB), np.uint64), (int(o), np.uint64), (CH, np.int32)]
                args += [(e, np.int32) for e in extra]
                k = drv.Kernel(kn, name, (NP, 1, 1), 128, args, pdl=False)
                k.launch(stream)
                outs[name] = o.download(np.empty((NP, 64, N), np.float32), stream)
                drv.sync(stream)
            value = from_f16 if half else from_bf16
            a64, b64 = value(A).astype(np.float64), value(B).astype(np.float64)
            ref = np.einsum("pcrk,pcnk->prn", a64, b64)
            scale = np.einsum("pcrk,pcnk->prn", np.abs(a64), np.abs(b64))
            for name, o in outs.items():
                err = np.max(np.abs(o - ref) / np.maximum(scale, 1e-30))
                line = f"N={N:2d} {mode:6s} {name:4s} max rel err vs f64 {err:.2e}"
                if name != "sync":
                    diff = int(np.sum(o.view(np.uint32) != outs["sync"].view(np.uint32)))
                    line += f"  differs from mma.sync in {diff} of {o.size}"
                    if err < 1e-3:
                        bad_total += diff
                print(line)
    print("WGMMA_EQUALS_MMA_SYNC" if bad_total == 0 else f"MISMATCH {bad_total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
