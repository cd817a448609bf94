"""GPU fixtures: the kernel table, a stream, and host<->device helpers for kernel-level tests, on the GPU or on the
host simulator (tests/engine/cuda/hostsim): a kernel-level test module parametrizes `gpu` with BACKENDS and runs
everywhere, its "sim" cases on any machine with g++ (CI's included), its "cuda" cases (marked gpu) on the GPU."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from .devices import DeviceHelpers

BACKENDS = [pytest.param("cuda", marks=pytest.mark.gpu), pytest.param("sim", marks=pytest.mark.hostsim)]


@pytest.fixture(scope="session")
def gpu(request):
    """(KernelTable, stream, helpers): on the primary context ("cuda", the default), or the simulator's ("sim",
    through `pytest.mark.parametrize("gpu", BACKENDS, indirect=True)`)."""
    if getattr(request, "param", "cuda") == "sim":
        if shutil.which("g++") is None:
            pytest.skip("the host simulator needs g++")
        from .hostsim.device import SimGpu

        return SimGpu()
    from qtui.engine.cuda import driver as drv
    from qtui.engine.cuda.kernels import KernelTable

    drv.primary_context()
    return Gpu(KernelTable(), drv.new_stream())


class Gpu(DeviceHelpers):
    simulated = False

    def __init__(self, kt, stream) -> None:
        from qtui.engine.cuda import driver as drv

        self.kt, self.stream, self.drv = kt, stream, drv
        self._live: list = []

    def put(self, host: np.ndarray):
        """Copy a host array to a new device buffer (freed at session end by GC of nothing: tests are small)."""
        buf = self.drv.DeviceBuffer(max(host.nbytes, 4))
        buf.upload(np.ascontiguousarray(host), self.stream)
        self.drv.sync(self.stream)
        self._live.append(buf)
        return buf

    def get(self, buf, shape, dtype=np.float32) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        buf.download(out, self.stream)
        self.drv.sync(self.stream)
        return out

    def get_split(self, sp, rows: int):
        """(xs uint32 [rows][n/4][4], xsum float32 [rows][n/16]) of a split buffer."""
        xs = np.empty((rows, sp.n // 4, 4), np.uint32)
        xsum = np.empty((rows, sp.n // 16), np.float32)
        for arr, ptr in ((xs, sp.xs), (xsum, sp.xsum)):
            self.drv.check(self.drv._cu().cuMemcpyDtoHAsync(arr.ctypes.data, ptr, arr.nbytes, self.stream), "DtoH")
        self.drv.sync(self.stream)
        return xs, xsum

    def get_bytes(self, ptr: int, nbytes: int) -> np.ndarray:
        """nbytes of device memory at a raw pointer (e.g. the KernelTable's own buffers)."""
        out = np.empty(nbytes, np.uint8)
        self.drv.check(self.drv._cu().cuMemcpyDtoHAsync(out.ctypes.data, ptr, nbytes, self.stream), "DtoH")
        self.drv.sync(self.stream)
        return out

    def run(self, *kernels) -> None:
        """Launch each kernel (or list of kernels: a GEMV site of two launches) in order, then sync."""
        for k in kernels:
            for one in k if isinstance(k, list) else [k]:
                one.launch(self.stream)
        self.drv.sync(self.stream)
