"""Weights on the device: matrices as their raw GGUF blocks (dequantized inside the GEMV kernels), small
vectors (norms, ssm_a, ssm_dt.bias, ssm_conv1d) as float32."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from qtui.engine.cuda.driver import DeviceBuffer, sync
from qtui.engine.cuda.kernels import UNIT_BYTES, qtype_name
from qtui.errors import EngineUnavailable
from qtui.model.layout import expected_tensors


@dataclass(frozen=True, slots=True)
class Matrix:
    """A weight W[n_out, n_in] on the device as raw GGUF rows of row_bytes each."""

    ptr: int
    qtype: str  # kernel suffix: f32 f16 bf16 q8_0 q4_k q5_k q6_k
    n_out: int
    n_in: int


class DeviceWeights:
    """Uploads every tensor the forward pass reads (layout.expected_tensors), once."""

    def __init__(self, model: Any, stream: Any, progress: bool = True) -> None:
        self.buffers: list[DeviceBuffer] = []
        self.matrices: dict[str, Matrix] = {}
        self.vectors: dict[str, int] = {}
        self.nbytes = 0
        names = expected_tensors(model.config)
        total = sum(model.tensors[n].n_bytes for n in names)
        t0, done, shown = time.perf_counter(), 0, -1
        for name, shape in names.items():
            if len(shape) == 2 and not name.endswith("ssm_conv1d.weight"):
                self._upload_matrix(model, name, shape, stream)
            else:
                self._upload_vector(model, name, stream)
            done += model.tensors[name].n_bytes
            pct = 100 * done // max(total, 1)
            if progress and pct // 10 != shown:
                shown = pct // 10
                print(f"\rqtui: uploading weights {done / 1e9:.2f}/{total / 1e9:.2f} GB ({pct}%)", end="",
                      file=sys.stderr, flush=True)
        sync(stream)
        if progress:
            print(f" in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    def _upload_matrix(self, model: Any, name: str, shape: tuple[int, ...], stream: Any) -> None:
        info = model.tensors[name]
        try:
            qtype = qtype_name(info.qtype)
        except ValueError as exc:
            raise EngineUnavailable(f"tensor {name}: {exc}") from None
        n_out, n_in = shape
        if n_in % 256:
            raise EngineUnavailable(f"tensor {name}: input dim {n_in} is not a multiple of 256 (CUDA GEMV unit)")
        raw = np.ascontiguousarray(model.raw(name))
        expect = n_out * (n_in // 256) * UNIT_BYTES[qtype]
        if raw.nbytes != expect:
            raise EngineUnavailable(f"tensor {name}: {raw.nbytes} bytes, expected {expect} for {qtype} {shape}")
        buf = self._put(raw, stream)
        self.matrices[name] = Matrix(int(buf), qtype, n_out, n_in)

    def _upload_vector(self, model: Any, name: str, stream: Any) -> None:
        vec = np.ascontiguousarray(model.dequantize(name), dtype=np.float32)
        self.vectors[name] = int(self._put(vec, stream))

    def _put(self, host: np.ndarray, stream: Any) -> DeviceBuffer:
        buf = DeviceBuffer(host.nbytes)
        buf.upload(host, stream)
        sync(stream)  # the host array may be a temporary (pageable): finish before it goes
        self.buffers.append(buf)
        self.nbytes += host.nbytes
        return buf

    def free(self) -> None:
        for buf in self.buffers:
            buf.free()
        self.buffers.clear()
