"""On the GPU: the 64-token GEMM's Q4_K unit rebuilt from the MMA skeleton up, piece by piece (gemm_unit_bisect.cu;
not a test: a reading aid for ptx/PERF.md). Prints, per combination of the kernel's pieces, the clock cycles per
m64n64k16 step per SM (35 steps per unit and warpgroup, two warpgroups a block, three in the unit_w3 kernels; 32
at the tensor cores' dense rate) and the unit's time. gemm_body's own unit reads ~60 cycles a step, the skeleton
of wgmma_rate.cu 38. unit_w<WG>c<CHAINS>_p127: the whole unit on WG warpgroups with CHAINS MMA chains a unit.

    cd tests/engine/cuda/probe && nvcc -ptx -arch=sm_90a -O3 -std=c++17 gemm_unit_bisect.cu -o gemm_unit_bisect.ptx
    python3 tests/engine/cuda/probe/gemm_unit_bisect.py [units per block] [kernel name regex, e.g. "w|p127$"]
"""

import re
import sys

import numpy as np

from qtui.engine.cuda import driver as drv
from tests.engine.cuda.probe.probe_launch import load_probe, time_launch

PIECES = ["STAGE", "BMOVE", "RAW", "FRAG", "WAITS", "MIN", "EPI"]  # bit i of the kernel's number
UNIT_BYTES, GX_MAT = 2304, 2048  # ptx/mma.cuh TQ4_K::UNIT, ptx/gemm.cuh GX_MAT
GX_CHUNK = 35 * GX_MAT + 64 * 16 * 4  # ptx/gemm.cuh GX_CHUNK


def stage_bytes(warpgroups: int) -> int:
    """A stage: the x prefix and the block's warps' weight units, rounded to 128 (GemmStage<TQ4_K>::BYTES at 2)."""
    return -(-(35 * GX_MAT + 4 * warpgroups * UNIT_BYTES) // 128) * 128


def main() -> int:
    mod, names, sms, clock_khz = load_probe("gemm_unit_bisect", r"unit_(?:w\dc\d_)?p\d+")
    rng = np.random.default_rng(7)
    stream = drv.new_stream()
    w = drv.DeviceBuffer(16 * 12 * UNIT_BYTES)  # 16 units of up to 12 warps'
    w.upload(rng.integers(0, 256, 16 * 12 * UNIT_BYTES, dtype=np.uint8), stream)
    gx = drv.DeviceBuffer(8 * GX_CHUNK)  # fp16 values in [1, 2) (and bf16 / float words of the same bits: finite)
    gx.upload((0x3C00 | rng.integers(0, 0x3FF, 8 * GX_CHUNK // 2)).astype(np.uint16), stream)
    out = drv.DeviceBuffer(sms * 384 * 4)
    units = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    names = [n for n in names if re.search(sys.argv[2] if len(sys.argv) > 2 else "", n)]  # e.g. "w|p127$"
    print(f"{sms} SMs, max clock {clock_khz / 1e6:.2f} GHz; {units} units per block")
    print(f"{'kernel':10} {'pieces':38} {'cyc/step/SM':>11} {'us/unit':>8}")
    for name in names:
        shape = re.fullmatch(r"unit_(?:w(\d)c(\d)_)?p(\d+)", name)
        assert shape is not None
        wg, chains, bits = int(shape[1] or 2), int(shape[2] or 2), int(shape[3])
        args = [(int(w), np.uint64), (int(gx), np.uint64), (units, np.int32), (int(out), np.uint64)]
        s = time_launch(mod, name, sms, 128 * wg, args, 2 * stage_bytes(wg) + 128, stream)
        cyc = s * clock_khz * 1e3 / (units * 35 * wg)
        pieces = "+".join(p for i, p in enumerate(PIECES) if bits >> i & 1) or "(skeleton)"
        if shape[1]:
            pieces = f"all, {wg} warpgroups x {chains} chain{'s' if chains > 1 else ''}"
        print(f"{name:10} {pieces:38} {cyc:11.1f} {s / units * 1e6:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
