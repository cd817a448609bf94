"""On the GPU: one wgmma k16 step vs one mma.sync m16n8k16 step, bitwise, on chains of CH steps of random data
(A: small integers as the dequantized weights are; B: bf16 of random magnitude). Prints the mismatch counts."""

import sys
from pathlib import Path

import numpy as np

from qtui.engine.cuda import driver as drv

HERE = Path(__file__).resolve().parent


def bf16(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32)


def main() -> int:
    from cuda.bindings import driver as cu

    drv.primary_context()
    print(drv.device_name())
    image = (HERE / "wgmma_probe.ptx").read_bytes() + b"\0"
    mod = drv.check(cu.cuModuleLoadData(image), "load")
    fn = {n: drv.check(cu.cuModuleGetFunction(mod, n.encode()), n) for n in ("sync_n8", "sync_n64", "wg_n8", "wg_n64")}
    rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    stream = drv.new_stream()
    CH, NP = 4, 4096
    bad_total = 0
    for N in (8, 64):
        for mode in ("wide", "hilo"):
            A = bf16(rng.integers(-64, 64, size=(NP, CH, 64, 16)).astype(np.float32))
            if mode == "wide":
                mag = np.exp2(rng.uniform(-24, 6, size=(NP, CH, N, 16)))
            else:  # hi terms ~1, lo terms ~2^-9 alternately, as the split activations
                lo_hi = np.where(np.arange(CH) % 2 == 0, 2.0**-9, 1.0)[None, :, None, None]
                mag = np.exp2(rng.normal(0, 2, size=(NP, CH, N, 16))) * lo_hi
            B = bf16(mag * rng.choice([-1.0, 1.0], size=mag.shape) * rng.uniform(1, 2, size=mag.shape))
            dA, dB = drv.DeviceBuffer(A.nbytes), drv.DeviceBuffer(B.nbytes)
            dA.upload(A, stream)
            dB.upload(B, stream)
            outs = {}
            for name, extra in (("sync", []), ("wg0", [0]), ("wg1", [1])):
                o = drv.DeviceBuffer(NP * 64 * N * 4)
                kn = fn[f"{'sync' if name == 'sync' else 'wg'}_n{N}"]
                args = [(int(dA), np.uint64), (int(dB), np.uint64), (int(o), np.uint64), (CH, np.int32)]
                args += [(e, np.int32) for e in extra]
                k = drv.Kernel(kn, name, (NP, 1, 1), 128, args, pdl=False)
                k.launch(stream)
                outs[name] = o.download(np.empty((NP, 64, N), np.float32), stream)
                drv.sync(stream)
            a64, b64 = from_bf16(A).astype(np.float64), from_bf16(B).astype(np.float64)
            ref = np.einsum("pcrk,pcnk->prn", a64, b64)
            scale = np.einsum("pcrk,pcnk->prn", np.abs(a64), np.abs(b64))
            for name, o in outs.items():
                err = np.max(np.abs(o - ref) / np.maximum(scale, 1e-30))
                line = f"N={N:2d} {mode:4s} {name:4s} max rel err vs f64 {err:.2e}"
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
