"""The GPU tests' device helpers (tests/engine/cuda/conftest.py Gpu) over the host simulator: buffers are host
arrays (a "device pointer" is the array's address), and a launch runs the kernel's C++ (hostsim.library()) on
the CPU with the arguments the engine's KernelTable builds. So a GPU test body runs unchanged on a machine
without a GPU: `test(sim_gpu, ...)`, the kernels and the launch logic of qtui/engine/cuda/kernels.py included."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..devices import DeviceHelpers
from . import PTX_DIR, library


def host_view(ptr: int, dtype, shape) -> np.ndarray:
    """The host memory at address ptr as an array (no copy)."""
    count = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.ctypeslib.as_array((ctypes.c_uint8 * count).from_address(ptr)).view(dtype).reshape(shape)


class SimBuffer:
    """A host array standing for a device allocation; int() is its address (aligned as cuMemAlloc's: 256)."""

    def __init__(self, nbytes: int) -> None:
        self.array = np.zeros(max(nbytes, 16) + 256, np.uint8)
        self.ptr = (self.array.ctypes.data + 255) // 256 * 256
        self.nbytes = nbytes

    def __int__(self) -> int:
        return self.ptr


class SimError(RuntimeError):
    """A kernel trapped or deadlocked in the simulator."""


class SimGpu(DeviceHelpers):
    """conftest.Gpu's methods on the simulator. `defines`, `ptx_dir`, `only`: another build of the kernels
    (hostsim.library)."""

    simulated = True

    def __init__(self, defines: tuple[str, ...] = (), ptx_dir: Path = PTX_DIR, only: tuple[str, ...] = ()) -> None:
        from qtui.engine.cuda import kernels

        self.lib = library(defines, ptx_dir, only)
        self._live: list[SimBuffer] = []
        kt = kernels.KernelTable(dry=True)  # sites without CUDA functions: we launch them by name
        kt.scratch = int(self._alloc(kernels.SCRATCH_BYTES))
        kt.counters = int(self._alloc(4 * kernels.MAX_COUNTERS))
        kt.gemm_x = int(self._alloc(kernels.GEMM_X_BYTES))
        kt.gemm_act = int(self._alloc(kernels.GEMM_X_BYTES))
        self.kt = kt

    def _alloc(self, nbytes: int) -> SimBuffer:
        buf = SimBuffer(nbytes)
        self._live.append(buf)
        return buf

    def put(self, host: np.ndarray) -> SimBuffer:
        host = np.ascontiguousarray(host)
        buf = self._alloc(host.nbytes)
        host_view(buf.ptr, np.uint8, (host.nbytes,))[:] = host.reshape(-1).view(np.uint8)
        return buf

    def get(self, buf, shape, dtype=np.float32) -> np.ndarray:
        return host_view(int(buf), dtype, shape).copy()

    def get_bytes(self, ptr: int, nbytes: int) -> np.ndarray:
        return host_view(ptr, np.uint8, (nbytes,)).copy()

    def get_split(self, sp, rows: int):
        xs = host_view(sp.xs, np.uint32, (rows, sp.n // 4, 4)).copy()
        xsum = host_view(sp.xsum, np.float32, (rows, sp.n // 16)).copy()
        return xs, xsum

    @contextmanager
    def blocks_in_reverse(self) -> Iterator[None]:
        """Launches inside run their blocks (clusters) last first, and each block's threads last first."""
        self.lib.qtui_sim_grid_reversed(1)
        try:
            yield
        finally:
            self.lib.qtui_sim_grid_reversed(0)

    def run(self, *kernels) -> None:
        """Run each kernel (or list of kernels) in order, to completion."""
        for k in kernels:
            for one in k if isinstance(k, list) else [k]:
                g = one.grid
                rc = self.lib.qtui_sim_launch(
                    one.name.encode(), g[0], g[1], g[2], one.block, one.shmem, one.cluster, one.params.ctypes.data
                )
                if rc != 0:
                    raise SimError(self.lib.qtui_sim_error().decode())
