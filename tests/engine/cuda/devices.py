"""What the kernel tests' two devices (conftest.Gpu on the GPU, hostsim.device.SimGpu on the simulator) share: the
helpers built on each one's put / run / kt."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


class DeviceHelpers:
    kt: Any  # the KernelTable the launches come from

    def put(self, host: np.ndarray):  # each device has its own
        raise NotImplementedError

    def run(self, *kernels) -> None:
        raise NotImplementedError

    @contextmanager
    def blocks_in_reverse(self) -> Iterator[None]:
        """Launches inside run their blocks in reverse grid order where the device has an order (the simulator, one
        block after another: arrival-count kernels then complete their counts in other blocks); the GPU runs them
        in no set order anyway."""
        yield

    def poisoned(self, shape, dtype=np.float32):
        """A device buffer filled with NaN (float) / -1 (int): an unwritten element cannot pass."""
        return self.put(np.full(shape, np.nan if np.dtype(dtype).kind == "f" else -1, dtype=dtype))

    def put_weight(self, qtype: str, raw: np.ndarray, n_out: int, n_in: int):
        """A weight as the engine holds it: integer quants repacked into tiles by the repack kernel, float types as
        their raw rows."""
        from qtui.engine.cuda.kernels import MMA_TYPES
        from qtui.engine.cuda.repack import tiled_nbytes

        if qtype not in MMA_TYPES:
            return self.put(raw)
        out = self.put(np.zeros(tiled_nbytes(qtype, n_out, n_in), np.uint8))
        self.run(self.kt.repack(qtype=qtype, raw=int(self.put(raw)), out=int(out), n_out=n_out, n_in=n_in))
        return out

    def put_split(self, x: np.ndarray):
        """Rows of float32 as a split-format activation (host oracle format, splitfmt.split)."""
        from qtui.engine.cuda.kernels import Split
        from qtui.engine.cuda.splitfmt import split

        xs, xsum = split(x)
        buf = self.put(np.concatenate([xs.reshape(-1).view(np.uint8), xsum.reshape(-1).view(np.uint8)]))
        return Split(int(buf), int(buf) + xs.nbytes, x.shape[-1])

    def split_buffer(self, rows: int, n: int):
        """A poisoned split-format buffer (0xFF bytes: NaN halves, NaN sums) for kernels to write."""
        from qtui.engine.cuda.kernels import Split

        buf = self.put(np.full(rows * n * 4 + rows * (n // 16) * 4, 0xFF, np.uint8))
        return Split(int(buf), int(buf) + rows * n * 4, n)
