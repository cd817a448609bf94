"""On the GPU: the warpgroup MMA's rate in gemm_body's patterns, alone (wgmma_rate.cu; not a test). Prints, per
kernel, the achieved dense bf16 rate (2 x 64 x 64 x 16 flops per step) and the clock cycles per m64n64k16 step
per SM (32 at the tensor cores' peak: 1024 dense flops per cycle per sub-partition)."""

import re
import sys

import numpy as np

from qtui.engine.cuda import driver as drv
from tests.engine.cuda.probe.probe_launch import load_probe, time_launch


def main() -> int:
    mod, names, sms, clock_khz = load_probe("wgmma_rate", r"rate_\w+")
    out = drv.DeviceBuffer(sms * 512 * 4)
    stream = drv.new_stream()
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    print(f"{sms} SMs, max clock {clock_khz / 1e6:.2f} GHz; {iters} x 8 groups per warpgroup")
    print(f"{'kernel (warpgroups, chains, steps per chain, FMA, interleaved)':64} {'TFLOP/s':>8} {'cyc/step/SM':>11}")
    for name in names:
        wg, ch, ln, fma, il = (int(v) for v in re.match(r"rate_w(\d+)_c(\d+)_l(\d+)_f(\d+)_i(\d+)", name).groups())
        args = [(int(out), np.uint64), (iters, np.int32)]
        s = time_launch(mod, name, sms, 128 * wg, args, 65536, stream)
        steps = sms * wg * iters * 8 * ln  # m64n64k16 steps in all
        tflops = steps * 2 * 64 * 64 * 16 / s / 1e12
        cyc = s * clock_khz * 1e3 / (steps / sms)
        print(f"{name:64} {tflops:8.1f} {cyc:11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
