"""On the GPU: the warpgroup MMA's rate in gemm_body's patterns, alone (wgmma_rate.cu; not a test). Prints, per
kernel, the achieved dense bf16 rate (2 x 64 x 64 x 16 flops per step) and the clock cycles per m64n64k16 step
per SM (32 at the tensor cores' peak: 1024 dense flops per cycle per sub-partition)."""

import re
import sys
from pathlib import Path

import numpy as np

from qtui.engine.cuda import driver as drv

HERE = Path(__file__).resolve().parent


def main() -> int:
    from cuda.bindings import driver as cu

    drv.primary_context()
    print(drv.device_name())
    sms = drv.device_attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    clock_khz = drv.device_attribute("CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
    text = (HERE / "wgmma_rate.ptx").read_text()
    mod = drv.check(cu.cuModuleLoadData(text.encode() + b"\0"), "load")
    names = re.findall(r"\.entry (rate_\w+)\(", text)
    out = drv.DeviceBuffer(sms * 512 * 4)
    stream = drv.new_stream()
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    print(f"{sms} SMs, max clock {clock_khz / 1e6:.2f} GHz; {iters} x 8 groups per warpgroup")
    print(f"{'kernel (warpgroups, chains, steps per chain, FMA, interleaved)':64} {'TFLOP/s':>8} {'cyc/step/SM':>11}")
    for name in names:
        wg, ch, ln, fma, il = (int(v) for v in re.match(r"rate_w(\d+)_c(\d+)_l(\d+)_f(\d+)_i(\d+)", name).groups())
        fn = drv.check(cu.cuModuleGetFunction(mod, name.encode()), name)
        attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        drv.check(cu.cuFuncSetAttribute(fn, attr, 65536), "smem")
        site = drv.Kernel(
            fn, name, (sms, 1, 1), 128 * wg, [(int(out), np.uint64), (iters, np.int32)], shmem=65536, pdl=False
        )
        site.launch(stream)
        drv.sync(stream)
        t0, t1 = drv.Event(), drv.Event()
        t0.record(stream)
        site.launch(stream)
        t1.record(stream)
        t1.synchronize()
        s = t1.elapsed_ms(t0) / 1e3
        steps = sms * wg * iters * 8 * ln  # m64n64k16 steps in all
        tflops = steps * 2 * 64 * 64 * 16 / s / 1e12
        cyc = s * clock_khz * 1e3 / (steps / sms)
        print(f"{name:64} {tflops:8.1f} {cyc:11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
