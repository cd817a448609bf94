"""Weights on the device: matrices dequantized inside the GEMV kernels, small vectors (norms, ssm_a,
ssm_dt.bias, ssm_conv1d) as float32.

Integer-quant matrices (Q4_K, Q5_K, Q6_K, Q8_0) are repacked on the GPU at load into the 16-row tiled layout of
ptx/mma.cuh (repack.py; same bytes as the file's). Float matrices stay as their raw rows. The projections that
share one input (a GDN layer's qkv, gate, beta, alpha; an attention layer's q, k, v) are stored back to back
per weight type, so one launch computes all of them (`Group`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from qtui.engine.cuda.driver import DeviceBuffer, sync
from qtui.engine.cuda.kernels import MMA_TYPES, UNIT_BYTES, KernelTable, qtype_name, row_bytes
from qtui.engine.cuda.repack import tiled_nbytes
from qtui.errors import EngineUnavailable
from qtui.model.layout import expected_tensors

# Projections read from the same normalized input, in output order (one launch per weight type).
SHARED_INPUT = (("attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha"), ("attn_q", "attn_k", "attn_v"))


@dataclass(frozen=True, slots=True)
class Matrix:
    """A weight W[n_out, n_in] on the device: tiled (integer quants) or raw rows (float types)."""

    ptr: int
    qtype: str  # kernel suffix: f32 f16 bf16, or one of the tiled integer quants (MMA_TYPES)
    n_out: int
    n_in: int

    @property
    def nbytes(self) -> int:
        if self.qtype in MMA_TYPES:
            return tiled_nbytes(self.qtype, self.n_out, self.n_in)
        return self.n_out * row_bytes(self.qtype, self.n_in)


@dataclass(frozen=True, slots=True)
class Group:
    """Matrices of one type sharing an input, stored back to back from `ptr` (one GEMV launch)."""

    qtype: str
    ptr: int
    members: tuple[str, ...]  # tensor names, in storage order


class DeviceWeights:
    """Uploads every tensor the forward pass reads (layout.expected_tensors), once, with a progress line."""

    def __init__(self, model: Any, kernels: KernelTable, stream: Any, progress: bool = True) -> None:
        self.buffers: list[DeviceBuffer] = []
        self.matrices: dict[str, Matrix] = {}
        self.vectors: dict[str, int] = {}
        self.groups: dict[str, list[Group]] = {}  # "blk.N.attn_qkv|..." -> groups by type
        self.nbytes = 0
        self._kt, self._stream = kernels, stream
        self._staging: DeviceBuffer | None = None
        names = expected_tensors(model.config)
        total = sum(model.tensors[n].n_bytes for n in names)
        self._progress = _Progress(total, progress)
        grouped = self._upload_groups(model, names)
        for name, shape in names.items():
            if name in grouped:
                continue
            if len(shape) == 2 and not name.endswith("ssm_conv1d.weight"):
                qtype = self._check(model, name, shape)
                buf = self._alloc(Matrix(0, qtype, *shape).nbytes)
                self._put_matrix(model, name, qtype, shape, int(buf))
            else:
                self._upload_vector(model, name)
            self._progress.add(model.tensors[name].n_bytes)
        sync(stream)
        if self._staging is not None:
            self._staging.free()
        self._progress.done()

    def group(self, layer: int, first: str) -> list[Group]:
        """The launch groups of layer `layer`'s shared-input projections starting with `first`."""
        return self.groups[f"blk.{layer}.{first}"]

    def _upload_groups(self, model: Any, names: dict[str, tuple[int, ...]]) -> set[str]:
        done: set[str] = set()
        for i in range(model.config.n_layer):
            for members in SHARED_INPUT:
                full = [f"blk.{i}.{s}.weight" for s in members]
                if not all(n in names for n in full):
                    continue
                by_type: dict[str, list[str]] = {}
                for n in full:
                    by_type.setdefault(self._check(model, n, names[n]), []).append(n)
                groups = []
                for qtype, group in by_type.items():
                    sizes = [Matrix(0, qtype, *names[n]).nbytes for n in group]
                    base = int(self._alloc(sum(sizes)))
                    offset = base
                    for n, size in zip(group, sizes):
                        self._put_matrix(model, n, qtype, names[n], offset)
                        self._progress.add(model.tensors[n].n_bytes)
                        offset += size
                    groups.append(Group(qtype, base, tuple(group)))
                self.groups[f"blk.{i}.{members[0]}"] = groups
                done.update(full)
        return done

    def _check(self, model: Any, name: str, shape: tuple[int, ...]) -> str:
        try:
            qtype = qtype_name(model.tensors[name].qtype)
        except ValueError as exc:
            raise EngineUnavailable(f"tensor {name}: {exc}") from None
        n_out, n_in = shape
        if n_in % 256:
            raise EngineUnavailable(f"tensor {name}: input dim {n_in} is not a multiple of 256 (CUDA GEMV unit)")
        expect = n_out * (n_in // 256) * UNIT_BYTES[qtype]
        if model.tensors[name].n_bytes != expect:
            raise EngineUnavailable(
                f"tensor {name}: {model.tensors[name].n_bytes} bytes, expected {expect} for {qtype} {shape}"
            )
        return qtype

    def _put_matrix(self, model: Any, name: str, qtype: str, shape: tuple[int, ...], dst: int) -> None:
        raw = np.ascontiguousarray(model.raw(name))
        n_out, n_in = shape
        if qtype not in MMA_TYPES:
            DeviceBuffer.upload_to(dst, raw, self._stream)
            sync(self._stream)  # the host array may be a temporary (pageable): finish before it goes
        else:
            staging = self._staging_for(raw.nbytes)
            staging.upload(raw, self._stream)
            self._kt.repack(qtype=qtype, raw=int(staging), out=dst, n_out=n_out, n_in=n_in).launch(self._stream)
            sync(self._stream)
        self.matrices[name] = Matrix(dst, qtype, n_out, n_in)

    def _staging_for(self, nbytes: int) -> DeviceBuffer:
        if self._staging is None or self._staging.nbytes < nbytes:
            if self._staging is not None:
                self._staging.free()
            self._staging = DeviceBuffer(nbytes)
        return self._staging

    def _upload_vector(self, model: Any, name: str) -> None:
        vec = np.ascontiguousarray(model.dequantize(name), dtype=np.float32)
        buf = self._alloc(vec.nbytes)
        buf.upload(vec, self._stream)
        sync(self._stream)
        self.vectors[name] = int(buf)

    def _alloc(self, nbytes: int) -> DeviceBuffer:
        buf = DeviceBuffer(nbytes)
        self.buffers.append(buf)
        self.nbytes += nbytes
        return buf

    def free(self) -> None:
        for buf in self.buffers:
            buf.free()
        self.buffers.clear()


class _Progress:
    """'qtui: uploading weights 1.23/2.70 GB (45%)' on stderr, every 10%."""

    def __init__(self, total: int, show: bool) -> None:
        self.total, self.show, self.done_bytes, self.shown, self.t0 = total, show, 0, -1, time.perf_counter()

    def add(self, nbytes: int) -> None:
        self.done_bytes += nbytes
        pct = 100 * self.done_bytes // max(self.total, 1)
        if self.show and pct // 10 != self.shown:
            self.shown = pct // 10
            print(
                f"\rqtui: uploading weights {self.done_bytes / 1e9:.2f}/{self.total / 1e9:.2f} GB ({pct}%)",
                end="",
                file=sys.stderr,
                flush=True,
            )

    def done(self) -> None:
        if self.show:
            print(f" in {time.perf_counter() - self.t0:.1f} s", file=sys.stderr)
