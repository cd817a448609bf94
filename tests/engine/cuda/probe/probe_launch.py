"""What the probe runners share (wgmma_rate.py, gemm_unit_bisect.py): a probe module's PTX loaded with its entry
points, the GPU's SM count and clock, and one warm launch timed (not a test)."""

import re
from pathlib import Path
from typing import Any

from qtui.engine.cuda import driver as drv

HERE = Path(__file__).resolve().parent


def load_probe(stem: str, entry: str) -> tuple[Any, list[str], int, int]:
    """probe/<stem>.ptx: (module, the entry points matching the regex `entry`, SMs, max clock in kHz)."""
    from cuda.bindings import driver as cu

    drv.primary_context()
    print(drv.device_name())
    text = (HERE / f"{stem}.ptx").read_text()
    mod = drv.check(cu.cuModuleLoadData(text.encode() + b"\0"), f"cuModuleLoadData({stem}.ptx)")
    sms = drv.device_attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    clock_khz = drv.device_attribute("CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
    return mod, re.findall(rf"\.entry ({entry})\(", text), sms, clock_khz


def time_launch(mod: Any, name: str, grid: int, block: int, args: list[Any], smem: int, stream: Any) -> float:
    """Seconds of one launch of `name` (grid x block, `smem` bytes of dynamic shared memory), after one to warm up."""
    from cuda.bindings import driver as cu

    fn = drv.check(cu.cuModuleGetFunction(mod, name.encode()), name)
    attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    drv.check(cu.cuFuncSetAttribute(fn, attr, smem), "cuFuncSetAttribute")
    site = drv.Kernel(fn, name, (grid, 1, 1), block, args, shmem=smem, pdl=False)
    site.launch(stream)
    drv.sync(stream)
    t0, t1 = drv.Event(), drv.Event()
    t0.record(stream)
    site.launch(stream)
    t1.record(stream)
    t1.synchronize()
    return float(t1.elapsed_ms(t0)) / 1e3
