"""GPU fixtures: the kernel table, a stream, and host<->device helpers for kernel-level tests."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="session")
def gpu():
    """(KernelTable, stream, helpers) on the primary context; only GPU tests request it."""
    from qtui.engine.cuda import driver as drv
    from qtui.engine.cuda.kernels import KernelTable

    drv.primary_context()
    return Gpu(KernelTable(), drv.new_stream())


class Gpu:
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

    def poisoned(self, shape, dtype=np.float32):
        """A device buffer filled with NaN (float) / -1 (int): an unwritten element cannot pass."""
        fill = np.full(shape, np.nan if np.dtype(dtype).kind == "f" else -1, dtype=dtype)
        return self.put(fill)

    def get(self, buf, shape, dtype=np.float32) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        buf.download(out, self.stream)
        self.drv.sync(self.stream)
        return out

    def run(self, *kernels) -> None:
        for k in kernels:
            k.launch(self.stream)
        self.drv.sync(self.stream)
